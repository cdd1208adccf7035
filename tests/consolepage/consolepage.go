// Package consolepage reads the kfsdb console's pages for the tests that
// drive it over HTTP (tests/consolehttp, tests/privilege): a number a page
// shows by its element's id, and the hidden fields of a form it posts.
package consolepage

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Number is the number shown in the element with id: `id="ID">N<`.
func Number(page, id string) (int, error) {
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `">(\d+)<`).FindStringSubmatch(page)
	if m == nil {
		return 0, fmt.Errorf("no #%s holding a number in the page", id)
	}
	return strconv.Atoi(m[1])
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// PostForm is the hidden fields of the page's first form that POSTs to
// action, unescaped; ok is false when the page has none.
func PostForm(page, action string) (form url.Values, ok bool) {
	i := strings.Index(page, `<form method="post" action="`+action+`"`)
	if i < 0 {
		return nil, false
	}
	end := strings.Index(page[i:], "</form>")
	if end < 0 {
		return nil, false
	}
	form = url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(page[i:i+end], -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	return form, true
}
