// io: what this process reads and what it writes, compared by file identity (device and inode,
// symbolic links followed) rather than by spelling, so that no output replaces one of the run's
// inputs or another output however the paths are written ("x", "./d/../x", a link to x); and the
// check of a write to a stream (stdout, the metrics file) that must end the run when it fails.
// Plain POSIX, no MPI: each rank keeps its own notes (outputs are noted by the rank that writes
// them), and callers turn a conflict into an error with comm_check_all.
#ifndef FSDPC_COMM_IO_H
#define FSDPC_COMM_IO_H

#include <stdio.h>

// Notes a file the run reads; `what` names it in messages ("the training data", "--init_from").
// Returns NULL, or the one-line error when it is an output noted before (that error is also kept
// for io_conflict). A path that cannot be stat'ed, or is not a regular file, is not noted.
const char *io_input(const char *path, const char *what);
// Notes a file the run will write under `flag` ("--metrics_file"). Returns NULL, or the error
// when it is a noted input, or the output of another flag (kept for io_conflict as well). A path
// that does not exist yet is compared by its folder's identity and its name, and by its own
// identity once it exists.
const char *io_output(const char *path, const char *flag);
// What io_output would answer, without noting the path: for files about to be replaced or removed.
const char *io_output_check(const char *path, const char *flag);
// Whether path is a file this process writes: one noted with io_output, or its standard output or
// error redirected there (by identity). For folders that should hold only what fsdpc wrote.
int io_is_output(const char *path);
// The first conflict io_input or io_output found on this rank, or NULL.
const char *io_conflict(void);
// First in main: a standard stream the launch closed (>&-, 2>&-, <&-) gets /dev/null opened the
// other way round, so writes to it still fail as on a closed one (EBADF) while no file opened later
// (a checkpoint, a shard, MPI's own) takes its number and receives log lines or generated text.
void io_guard_std_streams(void);
// NULL, or the line refusing a run that will write standard output when the launch closed it:
// said before the work, not at its end.
const char *io_stdout_open(void);
// Before MPI_Init: a rank that Open MPI's mpirun started, whose output mpirun forwards into a pipe
// (mpirun ... | head), writes stdout into that pipe itself: when the pipe loses its reader, the rank's write fails with EPIPE and the
// job ends with one "cannot write" line, where the launcher's forwarding would fail instead (Open
// MPI's mpirun aborts, then crashes or dies of SIGPIPE). That line when the reader is gone
// already, else NULL (also when the launcher's output is no pipe, or cannot be opened).
const char *io_launcher_stdout(void);
// NULL while every write to f has succeeded (f is flushed here), else "cannot write <what>: <the
// reason>" (a static buffer). Call it right after the writes: the reason is read from errno.
const char *io_write_error(FILE *f, const char *what);
// The writer lock of an output (base/wlock.h), taken for writer id and registered with
// comm_stop_unlink, so that an immediate stop removes it too. Returns the lock's path (heap), or NULL with
// the one-line error in *err. flag, output's name in messages; kind, what is written there.
char *io_lock_output(const char *output, int is_dir, const char *id, const char *flag, const char *kind, const char **err);
// Whether every path an output writes is one the operating system accepts (base/path.h's
// path_too_long), checked at start-up so that no write fails on a name after hours of work: the
// output itself, its writer lock's temporary, and output + longest, the longest name written
// (is_dir: a file in the folder, "sub/name" for one in a subfolder; else a suffix of the file's
// name). NULL, or the line naming flag, the length and the limit.
const char *io_check_output_path(const char *output, int is_dir, const char *longest, const char *flag);
// Drops the hold io_lock_output took (the file goes with the last) and frees lock; NULL: nothing.
void io_unlock_output(char *lock, const char *id);

#endif
