// Package checkpoint stores the checkpoints of a parameter server job: a
// folder of versions, the shard file format, and the re-split of a
// version's shards onto another number of shards. docs/checkpoint.md
// describes the folder and the formats byte by byte.
//
// # Folder
//
// A Store is one folder shared by the job's hosts. Each version is a
// sub-folder named "v" and the version number in at least 8 digits
// (v00000017). It holds one shard file per shard (ShardFile names them),
// the coordinator's own state file, and MANIFEST.json, which lists every
// other file with its size and SHA-256 and marks the version complete.
//
// # Writing a version
//
// Every process that writes files of version v calls Begin(v) (the folder
// is created once, whoever comes first) and Version.WriteFile for each
// file: the file is written under a temporary name unique to the call,
// fsynced, renamed, and the folder fsynced. The FileSums it returns go to
// the one process that commits (the coordinator), which calls Commit once
// every writer has reported: Commit checks that the files are there with
// their sizes, writes the manifest the same way, last, and removes old
// versions (all but the newest Keep complete ones, and partial versions
// older than the newest complete one). So a version is complete if and
// only if its manifest exists, and every file a manifest lists was durable
// before the manifest was written. Processes write different files of a
// version concurrently; nothing is locked.
//
// # Checksums
//
// The manifest lists the SHA-256 of each file. Its job is to tell that a
// file is the one its writer wrote for this version: not torn, truncated
// or damaged, and not an intact file of another version or job left or
// copied under the same name. A CRC32C could not do the second: a shard
// file ends with the CRC32C of what precedes it, and the CRC32C of any
// such file is the same constant (0x48674BC7), so every intact shard file
// would have the same manifest entry. SHA-256 costs more than CRC32C
// (BenchmarkChecksum measures both side by side), once per file written
// and twice per file on a resume; a checkpoint is written to storage at a
// fraction of either rate. It is not there against tampering: whoever can
// write a version's files can write its manifest too.
//
// # Reading
//
// Store.Latest tries the versions newest first and returns the first
// complete one whose files all match the manifest and that the caller's
// check accepts (the same job, shard files that decode), with an error
// for each version it passed over, naming the file at fault. Reading a
// file of the chosen Snapshot verifies it against the manifest again.
//
// # Shard files
//
// EncodeShard and DecodeShard write and read one shard's state (Shard: a
// ps.Checkpoint with its layout and the server's per-learner identity
// state) in a versioned little-endian binary format with a CRC32C over
// its header and one over the whole file. DecodeShard is strict: it
// never panics on any input, allocates in proportion to the bytes it has
// read, refuses a NaN or an infinity in the weights, the momentum or the
// accumulation (naming the first), and returns errors wrapping ErrFormat
// or ErrChecksum. It reads format versions 1 to 4; EncodeShard writes
// 4, which adds the state of the staleness rule (the solver's running
// statistics, the weights served to each learner) to version 3.
//
// # Another number of shards
//
// Resplit maps the shards of one version onto a layout with another
// number of shards: weights and momentum are re-split by range exactly;
// a new shard has consumed the mini-batches all the old shards it takes
// elements from had; what cannot be split exactly (pending
// accumulations, per-shard statistics) is dropped, as its doc comment
// details.
package checkpoint
