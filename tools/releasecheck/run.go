package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// runner runs the rehearsal's commands, printing each with where it ran,
// its duration and a short result.
type runner struct {
	out  io.Writer
	step string // the step being run, for StepError
	t0   time.Time
}

// section starts a numbered part of the rehearsal.
func (r *runner) section(name string) {
	r.step = name
	fmt.Fprintf(r.out, "\n== %s (at %.1fs)\n", name, time.Since(r.t0).Seconds())
}

// note prints a line of result under the current section.
func (r *runner) note(format string, args ...any) {
	fmt.Fprintf(r.out, "   "+format+"\n", args...)
}

// run runs name args in dir with env, prints the command and "ok" with its
// duration, and returns its combined output; a failure is a *StepError
// with the output's tail.
func (r *runner) run(dir string, env []string, name string, args ...string) (string, error) {
	cmdline := strings.TrimSpace(name + " " + strings.Join(args, " "))
	fmt.Fprintf(r.out, "$ %s\t(in %s)\n", cmdline, dir)
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		return buf.String(), &StepError{Step: r.step, Cmd: cmdline, Dir: dir, Output: buf.String(), Err: err}
	}
	fmt.Fprintf(r.out, "   ok (%.1fs)\n", time.Since(start).Seconds())
	return buf.String(), nil
}

// goEnv is the environment of the rehearsal's go commands: no workspace,
// -mod=mod, a private module cache and GOPATH under tmp, kfsdb's modules
// from the rehearsal's file proxy (then the machine's download cache, then
// the real proxy, for everything else) and not looked up in the checksum
// database; the local toolchain only. -trimpath keeps the build cache's
// keys free of the private module cache's path, so a second rehearsal
// compiles nothing it compiled before.
func goEnv(tmp, proxyDir string) ([]string, error) {
	realProxy, err := goEnvVar("GOPROXY")
	if err != nil {
		return nil, err
	}
	cache, err := goEnvVar("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	proxies := []string{"file://" + filepath.ToSlash(proxyDir)}
	if dl := filepath.Join(cache, "cache", "download"); isDir(dl) {
		proxies = append(proxies, "file://"+filepath.ToSlash(dl))
	}
	if realProxy != "" {
		proxies = append(proxies, realProxy)
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod -trimpath",
		"GOPROXY":     strings.Join(proxies, ","),
		"GONOSUMDB":   ModulePrefix,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOPATH":      filepath.Join(tmp, "gopath"),
		"GOMODCACHE":  filepath.Join(tmp, "gopath", "pkg", "mod"),
		"GOBIN":       filepath.Join(tmp, "bin"),
		"GOTOOLCHAIN": "local",
	}
	return withEnv(os.Environ(), set), nil
}

// withEnv is env with the variables of set replaced (or added).
func withEnv(env []string, set map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

func goEnvVar(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func isDir(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}
