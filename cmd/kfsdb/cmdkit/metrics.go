package cmdkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/knowledgefs/kfsdb/adapters/prom"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
)

// metricsScrapeTimeout bounds one /metrics request; the backlog sample
// has its own, shorter, timeout (prom.SampleTimeoutDefault).
const metricsScrapeTimeout = 10 * time.Second

// MetricsListenUsage is the --metrics-listen flag's usage (kfsdb console's,
// and kfsdb-bench's work and relay).
const MetricsListenUsage = "serve Prometheus metrics at http://ADDR/metrics while running, e.g. 127.0.0.1:9090 (default: off); off loopback it needs a bearer token ($" + EnvMetricsTokenFile + " or $" + EnvMetricsToken + ")"

// The metrics servers' token, read from the environment (never argv) by
// every command that serves metrics: with one, every scrape must send it
// as a bearer token; without one, only loopback scrapes through no proxy
// are served, and only a loopback address may be listened on.
const (
	EnvMetricsToken     = "KFSDB_METRICS_TOKEN"
	EnvMetricsTokenFile = "KFSDB_METRICS_TOKEN_FILE"
)

// MetricsToken reads the metrics token from $KFSDB_METRICS_TOKEN_FILE or
// $KFSDB_METRICS_TOKEN: "" when neither is set.
func MetricsToken() (string, error) {
	return httpguard.ReadToken(os.Getenv(EnvMetricsTokenFile), os.Getenv(EnvMetricsToken))
}

// ValidateMetricsListen accepts "" (off) or host:port, the latter only on
// loopback unless a strong metrics token is set.
func ValidateMetricsListen(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("invalid options: MetricsListen must be host:port: %w", err)
	}
	token, err := MetricsToken()
	if err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	if err := httpguard.ListenAllowed(addr, token, "MetricsListen"); err != nil {
		return fmt.Errorf("invalid options: %w (set $%s or $%s)", err, EnvMetricsTokenFile, EnvMetricsToken)
	}
	return nil
}

// MetricsServe says how a command serves its metrics (PoolSpec.Metrics).
type MetricsServe struct {
	// Addr is the host:port served. Defaults to "": not served.
	Addr string
	// TenantID, for a confined console, is the tenant whose backlog the
	// metrics count. Defaults to "": every tenant's.
	TenantID string
	// Throttle counts wrong tokens. Defaults to nil: the server's own;
	// kfsdb console shares its console's.
	Throttle *httpguard.Throttle
	// Token is the bearer token every scrape must send (MetricsToken;
	// never the console's). Defaults to "": loopback scrapes only.
	Token string
}

// metricsTimeouts bound the metrics server's connections: Write is above
// the scrape's own limit, Idle closes the connections a scraper keeps
// open and stops using.
var metricsTimeouts = httpguard.Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second,
	Write: metricsScrapeTimeout + 5*time.Second, Idle: time.Minute}

// MetricsProxyNote is what a tokenless metrics server says at start: it
// trusts a loopback request with no forwarding header, which is what a
// proxy on this host that adds none (nginx's proxy_pass, by default) makes
// every remote scrape look like.
const MetricsProxyNote = "these metrics have no token ($" + EnvMetricsTokenFile + " or $" + EnvMetricsToken + "), so only loopback scrapes without a forwarding header are served: " +
	"a proxy in front of them must add one (X-Forwarded-For or Forwarded; nginx's proxy_pass adds none by default, and through it every remote scrape looks local)"

// newMetricsRegistry returns a registry with the Go and process
// collectors and the statement tracer, which it sets on cfg; it makes room
// in cfg's pool for the backlog collector's sample (serveMetrics).
func newMetricsRegistry(cfg *pgxpool.Config) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tr, err := prom.NewTracer(reg, nil)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns++
	return reg, nil
}

// serveMetrics registers the backlog collector on reg and serves reg at
// http://ms.Addr/metrics, guarded by httpguard.Metrics, until stop is
// called.
func serveMetrics(reg *prometheus.Registry, pool *pgxpool.Pool, ms MetricsServe, out io.Writer, log *slog.Logger) (stop func(), err error) {
	if err := httpguard.ListenAllowed(ms.Addr, ms.Token, "MetricsListen"); err != nil {
		return nil, err
	}
	c, err := prom.NewCollector(pool, &prom.CollectorOptions{TenantID: ms.TenantID})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("register the backlog collector: %w", err)
	}
	ln, err := net.Listen("tcp", ms.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(httpguard.MetricsPath, httpguard.Metrics(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: metricsScrapeTimeout}),
		httpguard.MetricsGuard{Token: ms.Token, Throttle: ms.Throttle, Log: log}))
	srv := httpguard.NewServer(mux, metricsTimeouts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	fmt.Fprintf(out, "serving metrics on http://%s/metrics\n", ln.Addr())
	if ms.Token == "" {
		fmt.Fprintln(out, MetricsProxyNote)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
