package httpguard

import (
	"math"
	"strings"
)

// MinTokenBits is the fewest bits EstimateBits must find in a token: at
// 2^128 guesses a token cannot be guessed online at any rate, which is
// what protects it (a right token is never refused, see Throttle). A
// generated token (`openssl rand -base64 32`, NewToken's 43 characters)
// estimates at over 250.
const MinTokenBits = 128

// commonWords are the words people put in tokens and passwords: a
// token made of them is guessed from a list, not character by character.
var commonWords = []string{
	"password", "passwd", "secret", "token", "admin", "root", "login", "letmein", "welcome",
	"changeme", "default", "qwerty", "test", "kfsdb", "console", "metrics", "prometheus",
	"master", "dragon", "monkey", "iloveyou", "trustno", "access", "hello", "shadow",
}

// keyboardRows are runs of keys a hand types without thinking.
var keyboardRows = []string{"qwertyuiop", "asdfghjkl", "zxcvbnm", "1234567890", "!@#$%^&*()"}

// unleet maps the digits and symbols people write for letters.
var unleet = strings.NewReplacer("0", "o", "1", "l", "3", "e", "4", "a", "5", "s", "7", "t", "@", "a", "$", "s", "!", "i")

// EstimateBits estimates how many guesses (log2) a token takes an
// attacker who knows how people make tokens, in the manner of zxcvbn but
// much smaller: the token is read left to right as the cheapest of a
// character drawn at random from the classes it uses (lower, upper,
// digits, symbols), a repeat of something earlier in it (its position and
// length), a sequence (abcd, 9753), a keyboard run (qwerty), or a common
// word, leet spelling and capitals included. A random token scores about
// its length times log2 of its classes' size; "password1password1passw0rd"
// scores under 40.
func EstimateBits(token string) float64 {
	perChar := math.Log2(float64(alphabetSize(token)))
	bits := 0.0
	for i := 0; i < len(token); {
		n, cost := 1, perChar
		for _, m := range []match{repeatAt(token, i), sequenceAt(token, i, perChar), keyboardAt(token, i), wordAt(token, i)} {
			// Keep the pattern that saves the most bits over random
			// characters.
			if m.n > 0 && float64(m.n)*perChar-m.cost > float64(n)*perChar-cost {
				n, cost = m.n, m.cost
			}
		}
		bits += cost
		i += n
	}
	return bits
}

// match is a pattern found in a token: its length and its cost in bits
// (n is 0 when there is none).
type match struct {
	n    int
	cost float64
}

// alphabetSize is the size of the character classes token uses.
func alphabetSize(token string) int {
	var lower, upper, digit, other bool
	for _, c := range []byte(token) {
		switch {
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			other = true
		}
	}
	size := 0
	for _, class := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if class.used {
			size += class.size
		}
	}
	return max(size, 2)
}

// log2 of n, at least 1 bit.
func log2(n int) float64 { return max(1, math.Log2(float64(n))) }

// repeatAt is the longest run of 3 or more characters at i that starts
// earlier in s too (overlapping: "aaaa" repeats "aaa"), and its cost: where
// the earlier copy starts and how long it is.
func repeatAt(s string, i int) (m match) {
	for j := 0; j < i; j++ {
		n := 0
		for i+n < len(s) && s[j+n] == s[i+n] {
			n++
		}
		if n >= 3 && n > m.n {
			m.n, m.cost = n, log2(i)+log2(n)
		}
	}
	return m
}

// sequenceAt is the longest run of 3 or more characters at i that step by
// the same small amount (abc, 321, aceg), and its cost: its first
// character, its step and its length.
func sequenceAt(s string, i int, perChar float64) (m match) {
	if i+2 >= len(s) {
		return m
	}
	step := int(s[i+1]) - int(s[i])
	if step == 0 || step < -2 || step > 2 {
		return m
	}
	n := 2
	for i+n < len(s) && int(s[i+n])-int(s[i+n-1]) == step {
		n++
	}
	if n >= 3 {
		m.n, m.cost = n, perChar+2+log2(n)
	}
	return m
}

// keyboardAt is the longest run of 4 or more keys of one keyboard row at
// i, forwards or backwards, and its cost: its row, start and length.
func keyboardAt(s string, i int) (m match) {
	low := strings.ToLower(s[i:])
	for _, row := range keyboardRows {
		for _, r := range []string{row, reverse(row)} {
			for start := range r {
				n := 0
				for start+n < len(r) && n < len(low) && low[n] == r[start+n] {
					n++
				}
				if n >= 4 && n > m.n {
					m.n, m.cost = n, log2(len(keyboardRows)*2*len(row))+log2(n)
				}
			}
		}
	}
	return m
}

// wordAt is the longest common word at i (any case, leet spelling
// included), and its cost: which word, and one bit each for capitals and
// leet.
func wordAt(s string, i int) (m match) {
	for _, w := range commonWords {
		if i+len(w) > len(s) {
			continue
		}
		got := s[i : i+len(w)]
		low := strings.ToLower(got)
		plain := unleet.Replace(low)
		if plain != w || len(w) <= m.n {
			continue
		}
		cost := log2(len(commonWords))
		if low != got {
			cost++
		}
		if plain != low {
			cost++
		}
		m.n, m.cost = len(w), cost
	}
	return m
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
