package cli

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBenchOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	valid := BenchOpts{Out: &out, Duration: time.Second, Rate: 200}
	for name, tc := range map[string]struct {
		edit    func(o *BenchOpts)
		wantErr string
	}{
		"Valid":            {func(*BenchOpts) {}, ""},
		"Unpaced":          {func(o *BenchOpts) { o.Rate = 0 }, ""},
		"BadURL":           {func(o *BenchOpts) { o.DatabaseURL = "postgres://u@h:notaport/db" }, "not a valid PostgreSQL URL"},
		"MissingOut":       {func(o *BenchOpts) { o.Out = nil }, "Out is required"},
		"NegativeDuration": {func(o *BenchOpts) { o.Duration = -time.Second }, "Duration must not be negative"},
		"TooManyProducers": {func(o *BenchOpts) { o.Producers = 257 }, "Producers must be 1..256"},
		"NegativeWorkers":  {func(o *BenchOpts) { o.Workers = -1 }, "Workers must be 1..256"},
		"NegativeRate":     {func(o *BenchOpts) { o.Rate = -1 }, "Rate must be 0..1000000"},
		"NaNRate":          {func(o *BenchOpts) { o.Rate = math.NaN() }, "Rate must be 0..1000000"},
		"InfiniteRate":     {func(o *BenchOpts) { o.Rate = math.Inf(1) }, "Rate must be 0..1000000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := valid
			tc.edit(&o)
			requireValidateErr(t, o.Validate(), tc.wantErr)
		})
	}
}

func TestBenchUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bench", "extra"}, {"bench", "--rate", "-5"}, {"bench", "--rate", "x"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
	}
}
