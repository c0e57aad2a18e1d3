package main

// Processes: start in a session of their own, record "pid start-time", stop only what was
// recorded, wait for readiness with the log's tail on failure.

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// start launches one component in its own session so that it outlives this command, and
// records its pid so that `down` stops exactly it.
func (e env) start(name string, args ...string) error {
	binary, err := e.binary(name)
	if err != nil {
		return err
	}
	return e.startBinary(name, binary, false, args...)
}

// startBinary starts `binary` as component `name`, appending to its log instead of truncating
// it when appendLog (restarts keep the earlier lines).
func (e env) startBinary(name, binary string, appendLog bool, args ...string) error {
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("%s: binary not found at %s (run e2e/build-control-plane.sh or e2e/build-gardener.sh)", name, binary)
	}
	logPath := e.path("logs", name+".log")
	mode := os.O_TRUNC
	if appendLog {
		mode = os.O_APPEND
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|mode, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := e.command(name, binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: cannot start: %w (log: %s)", name, err, logPath)
	}
	// Record "pid start-time" so that a recycled pid is never mistaken for ours.
	record := fmt.Sprintf("%d %s", cmd.Process.Pid, procStart(cmd.Process.Pid))
	if err := e.writeRun(name+".pid", record); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// stop sends TERM to a process we started, and KILL if it is still alive after grace.
func stop(pid int, grace time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for j := 0; j < 100 && alive(pid); j++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// pid returns the recorded pid of a component if that very process is still alive.
func (e env) pid(name string) (int, bool) {
	fields := strings.Fields(e.readRun(name + ".pid"))
	if len(fields) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || !alive(pid) || procStart(pid) != fields[1] {
		return 0, false
	}
	return pid, true
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is dead for our purposes.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// procStart is the process start time in clock ticks (field 22 of /proc/PID/stat).
func procStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "?"
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return "?"
	}
	return fields[19]
}

// waitFor polls check until it passes; it gives up at once when the component has exited,
// and names the log to read either way.
func (e env) waitFor(what string, check func() error) error {
	deadline := time.Now().Add(e.timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = check(); last == nil {
			return nil
		}
		if _, ok := e.pid(what); !ok {
			last = fmt.Errorf("the process exited (last check: %v)", last)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not come up (waited up to %s): %v\n%s", what, e.timeout, last, e.logTail(what))
}

// logTail names a component's log and quotes its last lines.
func (e env) logTail(what string) string {
	logPath := e.path("logs", what+".log")
	tail := ""
	if raw, err := os.ReadFile(logPath); err == nil {
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		tail = "\n  " + strings.Join(lines, "\n  ")
	}
	return "read its log: " + logPath + tail
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// freePorts returns n free loopback ports, never one it returned before in this process (the
// garden and the first control plane pick theirs concurrently, and a port is free again the
// moment its probe closes).
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		port := l.Addr().(*net.TCPAddr).Port
		if !handedOut[port] {
			handedOut[port] = true
			ports = append(ports, port)
		}
	}
	return ports, nil
}
