// log: the log lines and the one printer of error lines. Only rank 0 logs (comm_init tells this
// module the rank); error lines come from whichever rank has the error.
#ifndef FSDPC_BASE_LOG_H
#define FSDPC_BASE_LOG_H

// the process's rank in the job, for log_msg's filter and error lines; 0 until comm_init sets it
void log_set_rank(int rank);
int log_rank(void);
// --log_timestamps: every log line starts with "YYYY-mm-dd HH:MM:SS L [rank R]", L being I, or W
// for a "warning:" message
void log_timestamps(int on);
// rank-0-only logging to stderr. A stderr that cannot be written (2>/dev/full) is fatal: the run
// must not go on, or end 0, as if its log were kept.
void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// "fsdpc: error: <msg>" on stderr, flushed: the line tests and users grep for; every exit path
// prints its error through here
void log_error(const char *msg);
// A thread that begins ending the job claims it: 1 for the first thread (again for it), 0 for any
// other, which must leave the end to it; once the first has printed its error line, only its
// lines are printed.
int log_end_claim(void);

#endif
