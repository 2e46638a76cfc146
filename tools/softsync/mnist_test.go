package main

import (
	"context"
	"sync"

	"github.com/softsync/softsync/learner/cluster"
)

// readMNISTOnce wraps find (findData) so that the data set "mnist", which
// many tests' jobs read (the GoMNIST module's gzipped files: seconds of
// decompression, ten times that under the race detector), is read once
// per test binary and shared. Jobs only read a data set, never write it;
// other names (folders the tests write) are read each time.
func readMNISTOnce(find func(context.Context, string, string) (cluster.DataSet, error)) func(context.Context, string, string) (cluster.DataSet, error) {
	var (
		mu    sync.Mutex
		mnist *cluster.DataSet
	)
	return func(ctx context.Context, name, goBin string) (cluster.DataSet, error) {
		if name != "mnist" {
			return find(ctx, name, goBin)
		}
		mu.Lock()
		defer mu.Unlock()
		if mnist != nil {
			return *mnist, nil
		}
		ds, err := find(ctx, name, goBin)
		if err == nil {
			mnist = &ds
		}
		return ds, err
	}
}
