// Teardown of a node environment, and the bookkeeping of what the node creates outside its state
// directory: cgroups, CNI result files, containerd's shim socket directory. Written for the failure case: every step runs even when an earlier one failed,
// and only what this environment made (by path or by recorded absence) is removed.

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Host paths the node may create when they are missing; `down` removes those it created
// (recorded at start) once they are empty.
var hostDirs = []string{"/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd"}

// recordHostState notes which of hostDirs are absent before the node starts.
func (e env) recordHostState() error {
	var absent []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, d)
		}
	}
	return os.WriteFile(e.path("run", "host-absent"), []byte(strings.Join(absent, "\n")+"\n"), 0o600)
}

// cgroupRoot is the kubelet's cgroup root: a child of the launcher's own memory cgroup (so pods
// are accounted, and stopped, with whatever started the tests), named after this environment.
// Recorded at start, since `down` may run from another cgroup.
func (e env) cgroupRoot() string {
	if raw, err := os.ReadFile(e.path("run", "cgroup-root")); err == nil {
		return strings.TrimSpace(string(raw))
	}
	base := "/"
	if raw, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && parts[1] == "memory" {
				base = parts[2]
			}
		}
	}
	return filepath.Join(base, "hapnode-"+e.id())
}

// cgroupMounts are the mount points of the cgroup v1 hierarchies.
func cgroupMounts() []string {
	var out []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup" {
				out = append(out, fields[4])
			}
		}
	}
	return out
}

// createCgroups makes the kubelet's cgroup root in every v1 hierarchy (the kubelet refuses a root
// that is missing in one) and records each directory it had to create, parents included.
func (e env) createCgroups() error {
	root := e.cgroupRoot()
	if err := os.WriteFile(e.path("run", "cgroup-root"), []byte(root+"\n"), 0o600); err != nil {
		return err
	}
	var created []string
	for _, m := range cgroupMounts() {
		rel := ""
		for _, part := range strings.Split(strings.Trim(root, "/"), "/") {
			rel = filepath.Join(rel, part)
			dir := filepath.Join(m, rel)
			if _, err := os.Stat(dir); err == nil {
				continue
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			created = append(created, dir)
			// A new cpuset cgroup has no CPUs or memory nodes until given its parent's.
			if strings.HasSuffix(m, "cpuset") {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f)); err == nil {
						_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
					}
				}
			}
		}
	}
	return os.WriteFile(e.path("run", "cgroups"), []byte(strings.Join(created, "\n")+"\n"), 0o600)
}

// removeCgroups removes the kubelet's cgroup root with everything under it in every hierarchy
// (the kubelet also creates it where it was not made beforehand, such as cgroup v2's unified
// mount in hybrid mode), deepest first, then the parents createCgroups had to make — those alone,
// not their other children. A cgroup with a process left in it cannot go; that is reported.
func (e env) removeCgroups() error {
	root := e.cgroupRoot()
	var dirs []string
	for _, m := range append(cgroupMounts(), "/sys/fs/cgroup/unified") {
		d := filepath.Join(m, root)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.SliceStable(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	if raw, err := os.ReadFile(e.path("run", "cgroups")); err == nil {
		created := strings.Split(strings.TrimSpace(string(raw)), "\n")
		sort.SliceStable(created, func(i, j int) bool { return len(created[i]) > len(created[j]) })
		for _, d := range created {
			if d != "" {
				// Only when empty: another environment may have made a child by now.
				_ = syscall.Rmdir(d)
			}
		}
	}
	return errors.Join(errs...)
}

// nodeDown stops the node before the control plane: the kubelet (so it restarts nothing), then
// every pod sandbox through the CRI (containers killed, CNI teardown, sandbox mounts and network
// namespaces released), then containerd and any shim of it still running, kube-proxy and
// kube-scheduler. The forwarder stops with the control plane.
func (e env) nodeDown() []error {
	var errs []error
	if pid, ok := e.pid("kubelet"); ok {
		stop(pid, 10*time.Second)
	}
	if _, ok := e.pid("containerd"); ok {
		if err := e.removePods(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range []string{"containerd", "kube-proxy", "kube-scheduler"} {
		if pid, ok := e.pid(c); ok {
			stop(pid, 10*time.Second)
		}
	}
	errs = append(errs, e.killShims()...)
	return errs
}

// removePods stops and removes every pod sandbox of this containerd.
func (e env) removePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+e.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("CRI client: %w", err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if status.Code(err) == codes.Unimplemented {
		// The CRI plugin never loaded: no pod was ever started.
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod sandbox %s (%s/%s): %w", s.Id, s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod sandbox %s: %w", s.Id, err))
		}
	}
	return errors.Join(errs...)
}

// killShims kills containerd-shim processes started for this environment's containerd (they
// outlive containerd by design) and the containers under them.
func (e env) killShims() []error {
	var errs []error
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		var pid int
		if _, err := fmt.Sscanf(ent.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		ours := false
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == e.containerdSocket() {
				ours = true
			}
		}
		if ours {
			errs = append(errs, fmt.Errorf("containerd shim %d outlived its pods; killed", pid))
			stop(pid, 2*time.Second)
		}
	}
	return errs
}

// unmountAll unmounts every mount under the state directory (the kubelet's root and pod
// volumes, containerd's snapshots, sandbox files and pod network namespaces), deepest first,
// until none is left.
func (e env) unmountAll() error {
	for round := 0; round < 10; round++ {
		var mounts []string
		raw, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			mp := unescapeMount(fields[4])
			if mp == e.dir || strings.HasPrefix(mp, e.dir+"/") {
				mounts = append(mounts, mp)
			}
		}
		if len(mounts) == 0 {
			return nil
		}
		sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
		for _, m := range mounts {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	return fmt.Errorf("mounts under %s remain after 10 rounds of unmounting", e.dir)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeHostLeftovers removes what containerd left outside the state directory: CNI results
// cached for its network, and the host directories it created (the kubelet writes nowhere on
// the host: see startKubelet).
func (e env) removeHostLeftovers() error {
	var errs []error
	if matches, err := filepath.Glob(filepath.Join("/var/lib/cni/results", e.cniNetwork()+"-*")); err == nil {
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if raw, err := os.ReadFile(e.path("run", "host-absent")); err == nil {
		for _, d := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if d != "" {
				// Only when empty: another environment may be using it by now.
				_ = syscall.Rmdir(d)
			}
		}
	}
	return errors.Join(errs...)
}

// nodeCleanup runs after every process is stopped: mounts, the network namespace, cgroups and
// host leftovers, in that order (a cgroup cannot go while a process is in it, a mount point
// directory cannot go while mounted).
func (e env) nodeCleanup() error {
	var errs []error
	if err := e.unmountAll(); err != nil {
		errs = append(errs, err)
	}
	if err := e.deleteNetns(); err != nil {
		errs = append(errs, err)
	}
	if err := e.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if err := e.removeHostLeftovers(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
