// Package natstest runs NATS servers with JetStream in the test process,
// on 127.0.0.1: one server, or a cluster whose routes stay on loopback. A
// server can be shut down and started again on the same ports and store,
// to simulate a broker outage or the loss of a stream leader.
package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds a server's start.
const readyTimeout = 10 * time.Second

// Node is one server. Safe for concurrent use.
type Node struct {
	// Name is the server's name (and its name in stream cluster info).
	Name string
	// URL is the client URL, nats://127.0.0.1:<port>; it stays the same
	// across Shutdown and Start.
	URL string

	dir         string
	port, cport int
	routes      []string

	mu  sync.Mutex
	srv *server.Server
}

// StartNode starts a single server with JetStream, its store in dir, on a
// free port of 127.0.0.1.
func StartNode(dir string) (*Node, error) { return StartNodeAt(dir, 0) }

// StartNodeAt is StartNode on port (0: a free one).
func StartNodeAt(dir string, port int) (*Node, error) {
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("natstest: port %d out of range", port)
	}
	if port == 0 {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		port = ports[0]
	}
	n := &Node{Name: "n1", URL: fmt.Sprintf("nats://127.0.0.1:%d", port), dir: dir, port: port}
	return n, n.Start()
}

// Start starts the server again after Shutdown (StartNode and
// StartCluster start it the first time).
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil && n.srv.Running() {
		return nil
	}
	o := &server.Options{
		ServerName: n.Name, Host: "127.0.0.1", Port: n.port,
		JetStream: true, StoreDir: n.dir, NoLog: true, NoSigs: true,
	}
	if n.cport != 0 {
		o.Cluster = server.ClusterOpts{Name: "kfsdb-test", Host: "127.0.0.1", Port: n.cport}
		o.Routes = server.RoutesFromStr(strings.Join(n.routes, ","))
	}
	srv, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("natstest: new server %s: %w", n.Name, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("natstest: server %s not ready within %s", n.Name, readyTimeout)
	}
	n.srv = srv
	return nil
}

// Shutdown stops the server (its store stays for Start).
func (n *Node) Shutdown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
}

// Cluster is a JetStream cluster of servers routed on loopback.
type Cluster struct {
	Nodes []*Node
}

// StartCluster starts size servers (n1, n2, …), each with its store in a
// subdirectory of dir, and returns once each accepts connections. Call
// WaitJetStream before creating streams: the meta leader is elected after.
func StartCluster(dir string, size int) (*Cluster, error) {
	ports, err := freePorts(2 * size)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range size {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[size+i]))
	}
	c := &Cluster{}
	for i := range size {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			dir: fmt.Sprintf("%s/n%d", dir, i+1), port: ports[i], cport: ports[size+i], routes: routes}
		c.Nodes = append(c.Nodes, n)
	}
	// Started together: each waits for routes to the others.
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	return c, nil
}

// URLs is every node's client URL, comma-separated, for nats.Connect.
func (c *Cluster) URLs() string {
	var us []string
	for _, n := range c.Nodes {
		us = append(us, n.URL)
	}
	return strings.Join(us, ",")
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for _, n := range c.Nodes {
		n.Shutdown()
	}
}

// WaitJetStream waits until JetStream answers on nc (a cluster has elected
// its meta leader), or ctx ends.
func WaitJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: JetStream not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n ports of 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natstest: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
