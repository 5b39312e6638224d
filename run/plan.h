// plan: `fsdpc plan`, a run's per-rank memory, communication and step time on a cluster it need
// not run on. Memory comes from the start-up check's own estimate (train_memory_estimate); the
// rest is a roofline of the strategy's collectives and the model's FLOPs.
#ifndef FSDPC_PLAN_H
#define FSDPC_PLAN_H

// argv[0] is "plan"; the training flags plus the planner's own. Prints on rank 0; returns the
// exit status.
int plan_main(int argc, char **argv);

#endif
