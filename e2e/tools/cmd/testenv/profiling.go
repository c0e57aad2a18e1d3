package main

import "os"

// profilingArg: /debug/pprof off, as a landscape runs its API servers, unless
// HAP_TESTENV_PROFILING=1 asks for it (the admission benchmark's profile of the API servers'
// CPU, BENCHMARKS.md).
func profilingArg() string {
	if os.Getenv("HAP_TESTENV_PROFILING") == "1" {
		return "--profiling=true"
	}
	return "--profiling=false"
}
