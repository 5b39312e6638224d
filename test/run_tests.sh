#!/usr/bin/env bash
# Runs every suite, echoes its ok/not ok lines, and ends with "N passed, N failed". With --quick
# (make check) only the fast tier runs: the suites registered with `quick` rather than `suite`.
# test/suites.sh runs the `suite`s two at a time and prints every suite's lines in this order.
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# a plain ./fsdpc (an Open MPI singleton) without the orted it would start for MPI_Comm_spawn, which
# fsdpc never calls: a second off each of the suites' many runs; test_cli.sh keeps the default start
export OMPI_MCA_ess_singleton_isolated=1
# the transport Open MPI picks here anyway, named: without it every start opens the cm PML's MTLs,
# whose PSM libraries calibrate a timer for ~0.2 s per process (test_ofi selects cm/ofi itself)
export OMPI_MCA_pml=ob1
source test/suites.sh "$@"

# make check's tier first, alone (test_check_tier judges its seconds)
quick "layers: includes and calls only go down base -> kernels -> comm -> model -> shard -> data/ckpt -> run -> main" bash test/meta/test_layers.sh
quick "kernels: finite differences and references" build/test_kernels
suite "kernels: the AVX2 builds of the CPU kernels (FSDPC_CPU_ISA=avx2) against the same references" env FSDPC_CPU_ISA=avx2 build/test_kernels
suite "cpu kernels: the instruction set named at start-up, AVX-512 trains as AVX2, bf16 matmuls track fp32 over 100 steps, forced emulation" bash test/integration/test_cpu_isa.sh
quick "comm: collectives (np=4)" mpirun --oversubscribe --allow-run-as-root -np 4 build/test_comm
quick "model: whole-model gradient check" build/test_model
quick "shard (fast tier): np=2 full-shard losses equal np=1" env FSDPC_QUICK=1 bash test/integration/test_shard.sh
quick "run tests: the suite runner's seconds per suite, ten slowest, total and over-budget warning, on made-up suites" bash test/meta/test_run_tests.sh
quick "checks: no suite's check reads $? after a command substitution in its name (such a check cannot fail)" bash test/meta/test_checks.sh
quick "help: --help of every subcommand from the command table, typos named, the table against the docs" bash test/meta/test_help.sh
# the parity comparisons below read what these write
alone "parity: PyTorch reference (dump)" build/test_model --dump "$DUMP"
alone "parity: minGPT PyTorch reference (dump)" build/test_model --dump "$DUMP/gpt" mingpt
# the rest two at a time, the longest first so that the last two end close together
suite "gpu-emu: the whole program on the emulated GPU" bash test/gpu/test_emu.sh
suite "gpu-emu: CUDA kernels against the CPU ones, on a CPU emulation of the GPU" build/test_gpu_emu
suite "gpu-emu: grouped matmuls through the loop of cuBLASLt products where libcublas is missing" env FSDPC_EMU_CUBLAS=missing build/test_gpu_emu --grouped
suite "offload: activation offloading on the emulated GPU: bit-identical losses, the tracker and the plan, the CPU no-op, refusals" bash test/gpu/test_offload.sh
suite "gpu-check: make gpu-check dry-runs on the emulator (bookkeeping and table, not timings)" bash test/gpu/test_gpu_check.sh
suite "plan: fsdpc plan against real start-up estimates and measured memory; run/plot.py" bash test/integration/test_plan.sh
suite "shard: multi-rank equivalence, memory, bad layouts" bash test/integration/test_shard.sh
suite "tp: the tensor-parallel mesh, its checks and refusals" bash test/integration/test_tp.sh
suite "cp: context parallelism (ring attention): its checks and refusals, losses equal one rank at cp 2 and 4 with FSDP, hybrid and tp, resume across degrees" bash test/integration/test_cp.sh
suite "ckpt: parallel checkpoints, resharding, crash safety" bash test/integration/test_ckpt.sh
suite "ckpt async: --async_checkpoint equal to synchronous checkpoints (losses, files, resume at two layouts); kill -9, SIGTERM, an error and a full disk during a background write; staging memory; ThreadSanitizer" bash test/integration/test_ckpt_async.sh
suite "rollback: --keep_snapshot and --on_nonfinite rollback: a forced non-finite batch skipped, losses equal to a run whose data never held it (np=1/2/4, replicas, async, emulated GPU); the skip list through checkpoints and resumes; bounds, refusals, memory" bash test/integration/test_rollback.sh
suite "arrow: Arrow IPC stream and file reader against apache-arrow" bash test/integration/test_arrow.sh
suite "mingpt: train, greedy generation and GPT2LMHeadModel export against the PyTorch reference" bash test/integration/test_mingpt.sh
suite "hf: Hugging Face weights in (safetensors) and out (export)" bash test/integration/test_hf.sh
suite "datasets: one token stream from JSON Lines, Arrow, Parquet, Hugging Face folders and hub names; hostile inputs" bash test/integration/test_datasets.sh
suite "llama3: rope_scaling llama3 against the PyTorch reference, checkpoints, export round trip, tied embeddings, presets, Llama-3 tokenizer.json, refusals" bash test/integration/test_llama3.sh
suite "finetune data: masks, -100 labels, layouts, packing equal to padding, formats, bad rows, document masking" bash test/integration/test_finetune_data.sh
suite "recipes: 10.FSDP's, SMP's and the profiling recipe's argument lists verbatim; refusals by name; schedules, validation batch, checkpointing, all-gathers" bash test/integration/test_recipes.sh
suite "faults: divergence, preemption, one-rank errors, memory, paths, flags" bash test/probes/test_faults.sh
suite "foreign: PyTorch and Hugging Face checkpoints (the recipes' layouts) refused as resume folders by name, a --checkpoint_dir holding files fsdpc did not write" bash test/probes/test_foreign.sh
suite "ptxas: no register spills in the attention kernels (sm_80, sm_90), backward blocks per SM" bash test/gpu/test_ptxas.sh
suite "emu-libs: emulated cuBLASLt 'not supported', asynchronous emulated NCCL (timeout, abort), no NCCL for 1-rank groups" bash test/gpu/test_emu_libs.sh
suite "probes phases: stop signals in every phase (exit 75, nothing partial, no lock; mpirun relaying); unread checkpoint entries and dataset fields warned" bash test/probes/test_probes_phases.sh
suite "trace: Chrome trace, flight recorder, collective timeout, NCCL errors (emulated)" bash test/integration/test_trace.sh
suite "gpt_neox: parity, training, GPTNeoXForCausalLM export/import and generation against the PyTorch reference" bash test/integration/test_neox.sh
suite "cli: errors, resume, evaluation, generation" bash test/integration/test_cli.sh
suite "mpich: make MPI=mpich; Hydra's mpiexec -n 2 -ppn 2 losses equal Open MPI's; errors, stop signals, binding, crossed launchers" bash test/integration/test_mpich.sh
suite "gpt2 tokenizer: encoder.json + vocab.bpe and byte-level tokenizer.json against js-tiktoken" bash test/integration/test_gpt2_tokenizer.sh
suite "probes identity: resume with changed inputs, ranks that see different files, checkpoint I/O under the collective timeout" bash test/probes/test_probes_identity.sh
suite "probes (limits): ulimit -v/-n/-f, umask, threads above the cores, overflowing sizes, errors that name their cause" bash test/probes/test_probes_limits.sh
suite "probes env: OpenMP/OpenBLAS variables that stalled the thread pools, SIGTERM under each; a stop obeyed when a kernel never returns" bash test/probes/test_probes_env.sh
suite "probes values: empty path flags, numeric ranges, counts at 0/1/max, all-masked validation, evaluate-only runs without weights, lossy export" bash test/probes/test_probes_values.sh
suite "probes pipes: stdout closed by its reader (| head) or at start (>&-), np=1 and under mpirun np=2" bash test/probes/test_probes_pipes.sh
suite "prepare: shards from text and JSON Lines" bash test/integration/test_prepare.sh
suite "container: Dockerfile installs through run/install-deps.sh and its build stage runs here; the MPIJob parses, requests GPUs and EFA, and its mpirun line trains" bash test/integration/test_container.sh
suite "chat tables: chat rows from Arrow and Parquet (list<struct>) as from JSON Lines; bad rows, damaged files" bash test/integration/test_chat_tables.sh
suite "probes, outputs: outputs that overlap inputs (by file identity) or fail (/dev/full)" bash test/probes/test_probes_outputs.sh
suite "probes, changing inputs: files cut under a running job (mapped: SIGBUS named; read: shrank), np=2" bash test/probes/test_probes_changing.sh
suite "probes, schedulers: a job suspended whole and resumed (no collective timeout), a CPU-time limit (SIGXCPU: checkpoint, 75)" bash test/probes/test_probes_sched.sh
suite "probes, messages: a relative tokenizer recorded whole for export elsewhere, a uint64 id named as the file holds it" bash test/probes/test_probes_messages.sh
suite "probes, crafted: checkpoints whose tensors or groups are soft or external links, or whose data lives outside the file" bash test/probes/test_probes_crafted.sh
suite "probes, types: config.json, adapter_config.json and tokenizer.json switches that are neither true, false nor null (transformers and PEFT take their truth) refused by name" bash test/probes/test_probes_types.sh
suite "probes writers: concurrent writers to one output (prepare, export, metrics, TensorBoard, traces), killed writers' leftovers, runaway shard counts, repeated inputs" bash test/probes/test_probes_writers.sh
suite "probes paths: data folders of long paths; folders of 200-3990 characters through every path flag (np=1, np=2 with ompio and romio); names beyond PATH_MAX refused at start-up" bash test/probes/test_probes_paths.sh
suite "parquet: Parquet reader against parquet-wasm (arrow-rs) files" bash test/integration/test_parquet.sh
suite "tokenizer: SentencePiece model and tokenizer.json against libsentencepiece" bash test/integration/test_tokenizer.sh
suite "plan calibration: fsdpc plan against published FSDP runs (speed, fits), the fit in run/plan.c, docs/planning.md's generated tables" bash test/integration/test_plan_calibration.sh
suite "h5data: minimal_fsdp-style HDF5 sample rows as training and validation data" bash test/integration/test_h5data.sh
suite "slurm: srun/sbatch/scancel/preemption on a real single-node Slurm" bash test/integration/test_slurm.sh
suite "probes lineage: checkpoint folders that hold other runs, names that lie about the step, several lineages" bash test/probes/test_probes_lineage.sh
suite "roundtrip: export keeps the import's max_position_embeddings, rope_theta, token ids and tokenizer files" bash test/integration/test_roundtrip.sh
suite "mistral: sliding-window attention; MistralForCausalLM import/export, generation past the window and parity against the PyTorch reference" bash test/integration/test_mistral.sh
suite "mixtral: a mixture of experts against the PyTorch reference (routing, router losses), equal losses at np=1/2/4 x ep 1/2/4 x tp 1/2 and with a capacity factor, resume across ep degrees, MixtralForCausalLM import/export, resume, refusals" bash test/integration/test_mixtral.sh
suite "lora: adapters on every family against the PyTorch reference (PEFT's formulas), step 0 equals the base, equal losses at np=1/2/4 across strategies, tp, sp, packing and ep, resume across layouts, the tracker, refusals" bash test/integration/test_lora.sh
suite "qlora: --quantize_base nf4 (an NF4 base under LoRA adapters): equal losses at every layout and ep, tracks LoRA, bit-exact resume of uint8 NF4 datasets, tracker and plan memory, the emulated GPU, --init_from, export dequantised, refusals" bash test/integration/test_qlora.sh
suite "sources: input formats by content; Hugging Face folders, caches and hub names" bash test/integration/test_sources.sh
suite "errors last: a plain input error ends the output with its one error line (np=1, np=2, one rank only, a locked folder)" bash test/probes/test_errors_last.sh
suite "sft: finetuning rows (input_ids, prompt/completion, Alpaca, chat templates) to ids and loss labels; Llama-2 chat against Meta's format" bash test/integration/test_sft.sh
suite "docs: README under 200 lines, links and anchors resolve, the docs' marked commands run" bash test/meta/test_docs.sh
suite "gpu bundle: run/gpu-bundle.sh's libraries and install line, inside a root of glibc, the bundle and CUDA stubs" bash test/gpu/test_bundle.sh
suite "finetune: import, finetune on 2 ranks, export, PyTorch greedy equality" bash test/integration/test_finetune.sh
suite "lora peft: PEFT adapter folders in (--init_adapter, np 1 and tp 2) and out (export --adapter) bit for bit, the merged export against torch and its greedy text, refusals" bash test/integration/test_lora_peft.sh
suite "data: formats, streaming, errors" bash test/integration/test_data.sh
suite "tensorboard: --tensorboard_dir event files decode with python3-protobuf, CRCs, the metrics file's scalars, resume" bash test/integration/test_tensorboard.sh
suite "neox tokenizer: GPT-NeoX-style tokenizer.json (NFC, added tokens for space runs) against a Python reference" bash test/integration/test_neox_tokenizer.sh
suite "fuzz: regression corpus under ASan/UBSan" bash test/fuzz/replay.sh
suite "nf4: NF4 packing with double quantisation and its dequantisation, bit for bit against QLoRA's and bitsandbytes' published algorithm" /usr/bin/python3 test/ref/nf4_ref.py build/test_kernels
suite "parity: PyTorch reference (compare)" /usr/bin/python3 test/ref/parity.py "$DUMP/step_00000000.h5"
suite "parity: minGPT PyTorch reference (compare)" /usr/bin/python3 test/ref/parity.py "$DUMP/gpt/step_00000000.h5"
suite "ofi: cm/ofi MTL over libfabric tcp matches the default transport; concurrent isolated singletons start" bash test/integration/test_ofi.sh
suite "check tier: make check passes in under 3 minutes with its suites" bash test/meta/test_check_tier.sh

suites_report
