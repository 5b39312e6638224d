// comm: process bootstrap, error exits and collectives. The only module that calls MPI.
#ifndef FSDPC_COMM_H
#define FSDPC_COMM_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>


typedef struct {
    int rank, world;             // in MPI_COMM_WORLD
    int local_rank, local_world; // on this node (MPI_COMM_TYPE_SHARED)
} CommInfo;

extern CommInfo comm_info;

void comm_init(int *argc, char ***argv);
void comm_finalize(void);
// Stop signals: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGXCPU (a scheduler's preemption or
// --signal, a terminal's ^C or ^\, a closed session, a CPU-time limit), handled from the program's load on. Every
// phase ends on one with COMM_EXIT_STOPPED, one line on rank 0 saying what stopped, and nothing
// partial under a final name. A phase that polls comm_stop_signal (training, validation,
// generation, data cache builds, prepare, export, tokenize) turns polling on and stops at its
// next boundary, removing its own temporaries. In any other moment (start-up, loading, plan) the
// handler ends the process at once: it removes the files registered with comm_stop_unlink, prints
// "Stopped by signal N (SIG...) during <phase>" and _exits with COMM_EXIT_STOPPED.
#define COMM_EXIT_STOPPED 75  // EX_TEMPFAIL: stopped before finishing; run it again to go on
extern volatile sig_atomic_t comm_stop_signal;
void comm_stop_polled(int on);  // off: a signal that came while polled ends the process now
// What an immediate stop interrupts, for its line ("loading", "plan"); a string that lives on.
void comm_stop_phase(const char *phase);
// Registers (on) or forgets (off) a file an immediate stop removes: a lock, a temporary being
// written. A few at a time (returns -1 when full); the path is copied.
int comm_stop_unlink(const char *path, int on);
// Collective: the stop signal any rank has received (the highest number), 0 when none.
int comm_stop_any(void);
// The watchdog of a polling phase whose work may not return (training, validation and generation
// run compute kernels): once a stop signal has come, the phase must mark progress (a micro-batch,
// a token, a checkpoint tensor) with comm_stop_progress within --collective_timeout; when nothing
// moves for that long the process ends as an immediate stop does, its line naming `phase` and the
// wait, status 75. NULL: no phase watched (a string that lives on).
void comm_stop_watch(const char *phase);
void comm_stop_progress(void);
// "SIGTERM", "SIGINT", ... for the stop signals, else "a signal"
const char *comm_signal_name(int sig);
// The MPI transport comm_init found, for the start-up log: "pml=<name>", plus " mtl=<name>" when
// the cm PML drives an MTL, plus " provider=<libfabric provider>" when that MTL is ofi, e.g.
// "pml=ob1" (TCP/shared-memory BTLs) or "pml=cm mtl=ofi provider=efa". The names are Open MPI's
// selected components; where they cannot be read, the requested MCA values (MPI_T, then the
// OMPI_MCA_* and FI_PROVIDER variables), and "unknown" for the PML when nothing tells.
// "provider=" is the requested include list ("auto" when none: libfabric picks). Under another
// MPI (MPICH, Cray MPICH): its version line, MPICH's device and FI_PROVIDER when set, e.g.
// "MPICH Version: 4.0.2, device ch4:ucx".
const char *comm_transport(void);
// fsdpc --version: "MPI: <the library's first line>" and, in a CUDA build, "NCCL: <version>" lines
const char *comm_library_versions(void);
// CPU threads per rank when --num_threads is 0: OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else
// the cores this process may run on, shared among the node's ranks when they are not pinned
int comm_default_threads(const char **source);
// The cores this process may run on (its affinity mask); the node's when that cannot be read.
int comm_pinned_cores(void);  // *source: where the number came from, for the log
// The launcher flags that give each rank `cores` cores under the MPI fsdpc is built with, for the
// warning about a rank bound to fewer (Open MPI's mpirun; MPICH's Hydra and Cray's PALS mpiexec)
const char *comm_bind_flags(long cores);
// --collective_timeout: a collective that waits longer than this (seconds; 0: for ever) prints the
// flight recorder on every waiting rank, names the ranks that never arrived and ends the job
// (MPI_Abort) instead of hanging
void comm_set_collective_timeout(double seconds);
// --collective_timeout for work that waits inside a library's own collectives, which comm_wait
// cannot watch (HDF5's MPI-IO in checkpoint writes and reads): while a phase is open, a watchdog
// thread restarts its clock at each comm_deadline_progress, and when --collective_timeout passes
// without any it prints one error line naming `what` and this rank, and ends the job (MPI_Abort)
// instead of hanging. Phases nest (the outermost names the phase); `what` is copied.
void comm_deadline_begin(const char *what);
void comm_deadline_progress(void);
void comm_deadline_end(void);
// peak resident memory of this process in MiB
double comm_peak_mem_mib(void);
// Memory this node can still give, in bytes: the smaller of MemAvailable and the room left under
// this process's cgroup limit; *source says which ("MemAvailable" or "cgroup limit").
double comm_mem_available(const char **source);

// An error every rank detects alike (bad flag, bad shape): rank 0 prints one line, every rank
// exits with status 1 without an MPI abort banner.
void comm_fail_all(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
// A failure after which libraries cannot shut down cleanly (a parallel HDF5 write that failed
// part-way can hang or crash in its exit-time close). Called by every rank: rank 0 prints one
// line, stdio is flushed, and the job ends through MPI_Abort (one rank: _exit), skipping every
// exit-time cleanup, so anything that must happen on exit is the caller's to do first.
void comm_abort_all(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
// A hook comm_fail_all, comm_fail_local, comm_abort_all and fatal errors call before they end
// the process (NULL: none): clean 1 from comm_fail_all (every rank agreed: MPI_Finalize follows),
// 0 from the others (MPI_Abort or _exit follows). It may be called from any thread.
void comm_on_exit(void (*hook)(int clean));
// An input error that only this rank sees, where no collective can agree on it (a bad token in
// its part of the data, a file it cannot write, an error other ranks never reached): the line,
// naming the rank, is the last this rank prints (no flight recorder: nothing internal went
// wrong), and every rank ends (MPI_Abort).
void comm_fail_local(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
// Collective "did any rank fail?": each rank passes its local error message (NULL when fine);
// if any rank has one, rank 0 prints the lowest failing rank's message and all ranks exit 1.
void comm_check_all(const char *local_error);
// The same agreement without exiting: NULL on every rank when no rank failed, else the lowest
// failing rank's message on every rank (a static buffer, valid until the next call).
const char *comm_first_error(const char *local_error);
// The agreement for code below run/, which returns errors rather than ending the job: 0 on every
// rank when no rank failed, else -1 on every rank with the lowest failing rank's line in err.
int comm_agree(const char *local_error, char *err, size_t errlen);
// Collective: every rank passes a hash of something that must agree (the parsed flags); a rank
// whose value differs from rank 0's ends the job with a line naming that rank and `what`.
void comm_check_same(uint64_t value, const char *what);
// Collective: every rank passes a text that must agree (the identities of the files it sees).
// Hashes are compared first; returns -1 when every rank's text is rank 0's, else the lowest rank
// whose text differs, with that rank's text in *theirs and rank 0's in *root on every rank
// (malloc'd: the caller frees them), so every rank can word the same error.
int comm_first_different(const char *mine, char **theirs, char **root);
// Fails on every rank when two ranks of one node hold the same non-empty value (e.g. a GPU's
// UUID), naming them, what the value is and the hint.
void comm_check_distinct_local(const char *value, const char *what, const char *hint);

FILE *comm_fopen_at(const char *file, int line, const char *path, const char *mode);
// Why `path` cannot be an output of `flag`, or NULL: a directory, or a FIFO (opening one waits for a
// reader); with replace (written to a temporary name, then renamed over it), anything but a
// regular file, since the rename would put a file where a device or link target was.
const char *comm_output_path_problem(const char *path, const char *flag, int replace);
#define fopenCheck(p, m) comm_fopen_at(__FILE__, __LINE__, (p), (m))
// Why an operation on path failed with errno err, for an error line: strerror(err), except that
// ENOTDIR names the part of the path that is a file where a folder is needed ("'a/b' is a file,
// not a folder"), EACCES a folder on the way that cannot be entered, and EFBIG ulimit -f's size.
// path may be NULL (a write whose file is named elsewhere).
const char *comm_path_error(const char *path, int err);
// Why path cannot be read as a file, or NULL: "it does not exist", "it is a folder, not a file",
// "it is empty", or what opening it says (comm_path_error: "Permission denied").
const char *comm_read_problem(const char *path);
// Why path cannot be a folder that `what` ("--checkpoint_dir") names, or NULL: a folder, or
// nothing yet (made when needed). "<what> '<path>' is a file, not a folder", or the reason stat
// gives (comm_path_error).
const char *comm_folder_problem(const char *path, const char *what);

// --environment pbs: logs the job ($PBS_JOBID) and its node file ($PBS_NODEFILE), both required
// (--environment local checks nothing)
void comm_check_pbs(void);

// ---- collectives on a group; float buffers unless stated ----
typedef struct CommGroup CommGroup;  // opaque: an MPI communicator
CommGroup *comm_world(void);
int comm_group_rank(const CommGroup *g);
int comm_group_size(const CommGroup *g);
// Whether MPI runs with MPI_THREAD_MULTIPLE (comm_init asks for it): a second thread may then make
// MPI calls on a communicator of its own while the main thread makes others.
int comm_thread_multiple(void);
// Collective on the world (the main thread): a duplicate of the world for one other thread's use
// (a checkpoint written in the background). Its collectives stay out of the flight recorder and
// the trace, and --collective_timeout does not watch them: that thread opens comm_deadline_begin.
CommGroup *comm_group_background(const char *name);
// comm_first_error among g's members (their ranks in g), with a buffer per thread: a background
// thread's agreement on its own group.
const char *comm_first_error_in(CommGroup *g, const char *local_error);
// g's communicator as MPI_Comm_c2f gives it, for a library that takes one (parallel HDF5)
int comm_group_fortran(const CommGroup *g);
void comm_barrier(CommGroup *g);
void comm_allreduce_sum_f32(CommGroup *g, float *buf, size_t n);
void comm_allreduce_sum_f64(CommGroup *g, double *buf, size_t n);
void comm_allreduce_max_f64(CommGroup *g, double *buf, size_t n);
void comm_allreduce_xor_u32(CommGroup *g, uint32_t *buf, size_t n);  // bitwise XOR
void comm_bcast_bytes(CommGroup *g, void *buf, size_t n, int root);
// Rank 0 of g receives every member's n bytes, in rank order, into *all (malloc'ed, *total
// bytes); the others get NULL and 0.
void comm_gather_bytes(CommGroup *g, const void *buf, size_t n, char **all, size_t *total);

// zlib CRC-32 of the bytes [begin, begin + len) of some array (len 0: none, crc 0).
typedef struct {
    uint64_t begin, len, crc;
} CommCrc;
// Combines the ranks' ranges entry by entry, in rank order, into the CRC of their concatenation
// (crc32_combine), on every rank of g. Ranges that do not adjoin in rank order give len UINT64_MAX.
void comm_allreduce_crc32(CommGroup *g, CommCrc *r, size_t n);

// The process mesh replica x shard x tp (shard/parallel.h): rank = (replica * shard_size + shard)
// * tp + tp rank, so a tensor-parallel group is `tp` consecutive ranks (inside a node); the shard
// group holds the shard_size ranks of one replica with the same tp rank (consecutive when tp is
// 1: one node by default); the replica group links the ranks with the same place in every
// replica. The caller checks world % (shard_size * tp) == 0 first.
void comm_make_mesh(int tp, int shard_size, CommGroup **tp_group, CommGroup **shard, CommGroup **replica);
// The context-parallel group (shard/parallel.h): the cp consecutive data-parallel ranks d = rank /
// tp with the same tp rank and the same d / cp. The caller checks that cp divides world / tp first.
void comm_make_cp_group(int tp, int cp, CommGroup **cp_group);
// The expert-parallel groups (shard/parallel.h), laid over the data-parallel ranks d = rank / tp
// with the same tp rank: the all-to-all group of `ep` consecutive d (an expert-parallel group),
// the expert shard group (the ranks of one shard group with the same place in their ep group,
// eshard of them) and the expert replica group (the ranks with the same experts and the same
// shard of them). The caller checks that ep and eshard fit the mesh first.
void comm_make_expert_groups(int tp, int shard_size, int ep, int eshard, CommGroup **ep_group, CommGroup **expert_shard,
                             CommGroup **expert_replica);
// QLoRA under tensor parallelism (UnitSpec.stored_whole): the groups sharding a unit stored whole,
// a shard group with its tp ranks (the shard_size * tp ranks of one replica) and, under expert
// parallelism (ep > 1, else NULL), an expert shard group with its tp ranks. After comm_make_mesh
// and comm_make_expert_groups, with the same arguments.
void comm_make_whole_groups(int tp, int shard_size, int ep, int eshard, CommGroup **whole, CommGroup **expert_whole);
// After kern_select_device: on a GPU with more than one rank, loads the collectives' library
// (NCCL, which comm_make_mesh then uses); NULL, or why it cannot (the caller ends the job).
const char *comm_open_gpu_transport(void);

// Every collective is numbered in its group's sequence and kept in the flight recorder
// (comm/flight.h); waits watch --collective_timeout; within --trace_steps each is a trace span.
// Blocking and non-blocking collectives on float buffers. n is per rank: all-gather takes n
// elements from each rank into out (size*n); reduce-scatter sums in (size*n) and leaves this
// rank's n elements in out. Buffers must stay untouched until comm_wait.
typedef struct CommRequest CommRequest;
void comm_all_gather(CommGroup *g, const float *in, float *out, size_t n);
void comm_reduce_scatter(CommGroup *g, const float *in, float *out, size_t n);
CommRequest *comm_all_gather_start(CommGroup *g, const float *in, float *out, size_t n);
CommRequest *comm_reduce_scatter_start(CommGroup *g, const float *in, float *out, size_t n);
CommRequest *comm_allreduce_start(CommGroup *g, float *buf, size_t n);
CommRequest *comm_allreduce_max_start(CommGroup *g, float *buf, size_t n);  // the maximum, element by element
CommRequest *comm_bcast_start(CommGroup *g, float *buf, size_t n, int root);
void comm_wait(CommRequest *r);  // completes and frees r; NULL is a no-op
// A ring's step (point to point: MPI on host buffers, NCCL send/recv on device buffers in a GPU
// run, on the collectives' stream): member i sends n floats' bytes to member i + 1 and
// receives member i - 1's into recv (modulo the group's size; send and recv must not overlap). Every
// member calls it; numbered, recorded and watched as a collective is.
CommRequest *comm_ring_shift_start(CommGroup *g, const float *send, float *recv, size_t n);
// All-to-all of rows of row_bytes: send holds the rows for member 0, then 1, ... (send_rows[j]
// of them for member j), recv gets member j's rows for this rank in member order (recv_rows[j]).
// Blocking; the counts must agree pairwise (each rank's recv_rows[j] is j's send_rows[me]).
void comm_all_to_all(CommGroup *g, const void *send, const size_t *send_rows, void *recv, const size_t *recv_rows,
                     size_t row_bytes);
// the same on bf16 values (uint16 storage); sums add in fp32 and round to bf16
CommRequest *comm_all_gather_bf16_start(CommGroup *g, const uint16_t *in, uint16_t *out, size_t n);
CommRequest *comm_reduce_scatter_bf16_start(CommGroup *g, const uint16_t *in, uint16_t *out, size_t n);
CommRequest *comm_allreduce_bf16_start(CommGroup *g, uint16_t *buf, size_t n);

#endif
