// plan: `fsdpc plan`, a run's per-rank memory, communication and step time on a cluster it need
// not run on. Memory comes from the start-up check's own estimate (run/memory.h); the
// rest is a roofline of the strategy's collectives and the model's FLOPs.
#ifndef FSDPC_PLAN_H
#define FSDPC_PLAN_H

#include "../base/cli.h"

// The planner's own flags, with the training flags as their base. Prints on rank 0; returns the
// exit status. args: what cli_parse of plan_cli filled.
extern const CliTable plan_cli;
int plan_main(void *args);

#endif
