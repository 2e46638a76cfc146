// Package launcher reads a process's place in a multi-process job from the
// environment its launcher set: Open MPI's mpirun (OMPI_COMM_WORLD_*),
// MPICH's Hydra (PMI_RANK, PMI_SIZE, MPI_LOCAL*), or Slurm's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...). softsync does not
// link an MPI library: every process of a job reads its rank, the world
// size and the nodes here, and the roles meet over their own transport.
//
// Detect takes the environment as a function (os.Getenv in the binary, a
// recorded environment in tests) and returns a World; World.Check compares
// it with the size the job was asked for and explains a mismatch by the
// variables found. ExpandNodeList and ExpandTasksPerNode expand Slurm's
// compressed lists.
//
// The recorded environments under testdata/env come from real runs of
// Open MPI 4.1, MPICH 4.0 and Slurm 22.05 (clustertest's TestLaunchers
// with -clustertest.record).
package launcher
