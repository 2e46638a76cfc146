package main

import (
	"time"

	"github.com/spf13/pflag"
)

// clusterFlags are the flags of a process that takes part in a job of
// several processes (docs/cluster.md).
type clusterFlags struct {
	mode          string        // --cluster: "" (one process) or "auto"
	transport     string        // --transport; "" = inmem in one process, auto across processes
	coordinator   string        // --coordinator HOST:PORT
	listen        string        // --listen HOST[:PORT]
	rendezvousDir string        // --rendezvous-dir
	secretFile    string        // --secret-file
	insecure      bool          // --insecure
	heartbeat     time.Duration // --heartbeat
	rendezvous    time.Duration // --rendezvous-timeout
	id            int           // --id (role commands)
}

// addClusterFlags adds the flags of multi-process jobs; train also gets
// --cluster and the in-process transports.
func addClusterFlags(fl *pflag.FlagSet, c *clusterFlags, train bool) {
	if train {
		fl.StringVar(&c.mode, "cluster", "", `"auto": this process is one rank of a job started by mpirun, mpiexec or srun, which every rank runs with the same flags; its role comes from its rank (docs/cluster.md)`)
		fl.StringVar(&c.transport, "transport", "", "inmem (in-process channels) or tcp (loopback sockets) for one process; tcp, verbs or auto (verbs where both ends have an RDMA port, else TCP) across processes (default: inmem, auto across processes)")
	} else {
		fl.StringVar(&c.transport, "transport", "auto", "tcp, verbs or auto (verbs where both ends have an RDMA port, else TCP); every process of the job uses the same")
	}
	fl.StringVar(&c.coordinator, "coordinator", "", "HOST:PORT of the job's coordinator: where it listens (its own process) or where the others dial it")
	fl.StringVar(&c.listen, "listen", "", "HOST or HOST:PORT this process listens on for the job's connections (default: loopback when the job runs on one host, else this host's address)")
	fl.StringVar(&c.rendezvousDir, "rendezvous-dir", "", "a folder shared by the job's hosts where the coordinator writes its address and the job's secret for the others (instead of --coordinator)")
	fl.StringVar(&c.secretFile, "secret-file", "", "file holding the job's secret (at least 16 bytes; must not be readable by group or others); default: $SOFTSYNC_SECRET, or one made for the job")
	fl.BoolVar(&c.insecure, "insecure", false, "allow listening on a non-loopback address without a secret (anyone who reaches the port can disturb the job)")
	fl.DurationVar(&c.heartbeat, "heartbeat", 5*time.Second, "a learner silent for this long is removed from the job (its chunks go to others)")
	fl.DurationVar(&c.rendezvous, "rendezvous-timeout", 2*time.Minute, "how long to wait for every process of the job to arrive")
}
