package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// clusterFlags are the flags of a process that takes part in a job of
// several processes (docs/cluster.md).
type clusterFlags struct {
	mode           string        // --cluster: "" (one process) or "auto"
	transport      string        // --transport; "" = inmem in one process, auto across processes
	coordinator    string        // --coordinator HOST:PORT
	listen         string        // --listen HOST[:PORT]
	rendezvousDir  string        // --rendezvous-dir
	rendezvousFile string        // --rendezvous-file (eval)
	secretFile     string        // --secret-file
	insecure       bool          // --insecure
	heartbeat      time.Duration // --heartbeat
	rendezvous     time.Duration // --rendezvous-timeout
	psTimeout      time.Duration // --ps-timeout
	ckptDir        string        // --checkpoint-dir
	ckptEvery      string        // --checkpoint-every: N mini-batches or a duration
	resume         string        // --resume DIR
	id             int           // --id (role commands)
	metrics        string        // --metrics HOST:PORT
	sched          string        // --sched: a learner process's scheduling policy
}

// addClusterFlags adds the flags of multi-process jobs; train also gets
// --cluster and the in-process transports.
func addClusterFlags(fl *pflag.FlagSet, c *clusterFlags, train bool) {
	if train {
		fl.StringVar(&c.mode, "cluster", "", `"auto": this process is one rank of a job started by mpirun, mpiexec or srun, which every rank runs with the same flags; its role comes from its rank (docs/cluster.md)`)
		fl.StringVar(&c.transport, "transport", "", "inmem (in-process channels) or tcp (loopback sockets) for one process; tcp, shm (shared memory, one host), verbs or auto (shm to processes on this host, else verbs where both ends have an RDMA port, else TCP) across processes (default: inmem, auto across processes)")
	} else {
		fl.StringVar(&c.transport, "transport", "auto", "tcp, shm (shared memory, one host), verbs or auto (shm to processes on this host, else verbs where both ends have an RDMA port, else TCP); every process of the job uses the same")
	}
	fl.StringVar(&c.coordinator, "coordinator", "", "HOST:PORT of the job's coordinator: where it listens (its own process) or where the others dial it")
	fl.StringVar(&c.listen, "listen", "", "HOST or HOST:PORT this process listens on for the job's connections (default: loopback when the job runs on one host, else this host's address)")
	fl.StringVar(&c.rendezvousDir, "rendezvous-dir", "", "a folder shared by the job's hosts where the coordinator writes its address and the job's secret for the others (instead of --coordinator)")
	fl.StringVar(&c.secretFile, "secret-file", "", "file holding the job's secret (at least 16 bytes; must not be readable by group or others); default: $SOFTSYNC_SECRET, else one made for the job where it can be handed out (docs/cluster.md, Security)")
	fl.BoolVar(&c.insecure, "insecure", false, "run without a secret where the job would need one (anyone who reaches the job's ports can join it or disturb it; docs/cluster.md, Security)")
	fl.DurationVar(&c.heartbeat, "heartbeat", 5*time.Second, "a learner silent for this long is removed from the job (its chunks go to others); > 0")
	fl.DurationVar(&c.rendezvous, "rendezvous-timeout", 2*time.Minute, "how long to wait for every process of the job to arrive; > 0")
	fl.StringVar(&c.ckptDir, "checkpoint-dir", "", "write checkpoints into this folder (shared by the job's hosts): every --checkpoint-every, when the job is interrupted, and when a shard server is stopped (docs/checkpoint.md)")
	fl.StringVar(&c.ckptEvery, "checkpoint-every", "", "with --checkpoint-dir: a checkpoint every N mini-batches (all learners) or every DURATION (e.g. 10m); default: only when interrupted or stopped")
	fl.StringVar(&c.resume, "resume", "", "continue the job from the newest complete checkpoint in this folder (another number of --shards is fine); checkpoints then go on there unless --checkpoint-dir says otherwise")
	fl.StringVar(&c.metrics, "metrics", "", "HOST:PORT where this process serves Prometheus metrics at /metrics while it runs (docs/metrics.md); port 0 picks a free one, which is logged. With --cluster auto rank r serves on PORT+r; for launch this is the head's, and its shard servers and learners get the ports after it (see launch --help)")
	fl.StringVar(&c.sched, "sched", "batch", "the scheduling policy of a learner process (softsync learner, a learner's rank under --cluster auto): batch (SCHED_BATCH: its threads never preempt another task when they wake, so the shard servers' and the head's short work goes first) or normal; other processes, and one started under a real-time or idle policy, keep theirs")
	fl.DurationVar(&c.psTimeout, "ps-timeout", time.Minute, "how long learners retry, with backoff, to reach a shard server whose connection failed (it may be restarting with --resume), and the coordinator waits for it, before the job fails; also how long every process dials again a listener that closes its connection during the handshake (one busy with unauthenticated connections); 0: the job fails at once")
}

// check refuses the values that would silently turn a safeguard off: a
// heartbeat or a rendezvous timeout that is not positive (no learner
// would ever be removed, the rendezvous would wait for ever), a negative
// --ps-timeout; and an unknown --sched.
func (c *clusterFlags) check() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--heartbeat", c.heartbeat}, {"--rendezvous-timeout", c.rendezvous}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: must be > 0, got %v", d.flag, d.v)
		}
	}
	if _, err := schedPolicy(c.sched); err != nil {
		return err
	}
	if c.psTimeout < 0 {
		return fmt.Errorf("--ps-timeout: must be ≥ 0 (0: the job fails as soon as a shard server is lost), got %v", c.psTimeout)
	}
	return nil
}
