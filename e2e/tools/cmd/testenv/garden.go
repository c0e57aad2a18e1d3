package main

// A separate garden: a second control plane with gardener-apiserver in DIR/garden, as in a real
// landscape where bindings and Shoots live in the garden and the operator in another cluster.
// It has its own etcd, certificates, admin token, audit log and kubeconfig
// (DIR/garden/kubeconfig); `down` of the outer directory stops it first.

import (
	"os"
	"path/filepath"
)

func (e env) garden() env {
	return env{dir: filepath.Join(e.dir, "garden"), bin: e.bin, gardenerBin: e.gardenerBin, timeout: e.timeout, netns: e.netns}
}

func (e env) exists() bool {
	_, err := os.Stat(e.path("run"))
	return err == nil
}

func (e env) upGarden() error {
	_, err := e.garden().up(options{Gardener: true})
	return err
}
