// The network namespace of a node environment: created by the launcher, pinned in the state
// directory (not in /run/netns, so no host-wide mount is made for it), entered with nsenter by
// every process of the environment, and dialled into by the launcher's own HTTP checks and the
// loopback forwarder.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// netnsPath is the file the namespace is pinned to (a bind mount of /proc/PID/ns/net).
func (e env) netnsPath() string { return e.path("run", "netns") }

// createNetns makes a new network namespace pinned at netnsPath, with lo up, the node IP on lo,
// and forwarding on, all inside the namespace.
func (e env) createNetns() error {
	if err := os.WriteFile(e.netnsPath(), nil, 0o600); err != nil {
		return err
	}
	if out, err := exec.Command("unshare", "--net="+e.netnsPath(), "true").CombinedOutput(); err != nil {
		return fmt.Errorf("creating the network namespace (unshare --net=%s): %v: %s", e.netnsPath(), err, out)
	}
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", nodeIP + "/32", "dev", "lo"},
		// A route for Service IPs, so that a connection from the node itself gets past the
		// routing decision to kube-proxy's DNAT (the namespace has no default route).
		{"ip", "route", "add", serviceSubnet, "dev", "lo"},
		// Pods reach Services through kube-proxy's DNAT and each other through the bridge.
		{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	} {
		if out, err := e.inNetns(args...).CombinedOutput(); err != nil {
			return fmt.Errorf("in the node's network namespace: %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// Bridged pod traffic must pass iptables for Service DNAT between pods on the bridge. The
	// knob exists only when br_netfilter is in the kernel; it is per namespace.
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
		_ = e.inNetns("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1").Run()
	}
	return nil
}

// deleteNetns unpins the namespace; it disappears with the last process in it.
func (e env) deleteNetns() error {
	if _, err := os.Stat(e.netnsPath()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := syscall.Unmount(e.netnsPath(), syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmounting %s: %w", e.netnsPath(), err)
	}
	return os.Remove(e.netnsPath())
}

// inNetns is a command that runs inside the node's network namespace (and only that: the mount
// namespace stays the host's, so mounts made by the kubelet and containerd are seen by both).
func (e env) inNetns(args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + e.netns, "--"}, args...)...)
}

// dialInNetns dials addr from inside the namespace at ns. The socket is created on an OS thread
// that entered the namespace and is never used again (a goroutine that exits while locked takes
// its thread with it), so the rest of the process stays in the host's namespace.
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(ns)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// inNode makes an HTTP client dial inside the node's namespace when this is a node environment,
// so the launcher's readiness checks reach components that listen only there.
func (e env) inNode(c *http.Client) *http.Client {
	if e.netns == "" {
		return c
	}
	tr, ok := c.Transport.(*http.Transport)
	if !ok || tr == nil {
		tr = &http.Transport{}
	} else {
		tr = tr.Clone()
	}
	ns := e.netns
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialInNetns(ctx, ns, network, addr)
	}
	out := *c
	out.Transport = tr
	return &out
}

// forward accepts connections on listen (host namespace) and connects each to target inside the
// namespace at ns. It runs as the `forward` component of a node environment, so tests on the
// host use the kube-apiserver that listens inside the namespace through the usual kubeconfig.
func forward(listen, ns, target string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			up, err := dialInNetns(ctx, ns, "tcp", target)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "forward: dialling %s in %s: %v\n", target, ns, err)
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				// Half-close so the other direction can finish (TLS close_notify, HTTP/2 GOAWAY).
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(up, c)
			go pipe(c, up)
			<-done
			<-done
		}()
	}
}
