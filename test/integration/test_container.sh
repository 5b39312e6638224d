#!/usr/bin/env bash
# The container and the Kubernetes jobs without docker or a cluster: the Dockerfile's install steps
# are run/install-deps.sh itself (parsed: in each stage a COPY of the script and a RUN of it, no
# other package installs), its build stage's commands run here as written (the script in check
# mode), and each MPIJob (run/launch/mpijob.yaml, the MPI Operator's kubeflow.org/v2beta1, and
# run/launch/mpijob-v1.yaml, the training-operator's kubeflow.org/v1) parses as YAML with its GPU
# and EFA requests, and its launcher's mpirun line, scaled down to 2 ranks and a tiny model, trains.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
python3 -c "import yaml" 2>/dev/null || { echo "not ok - container: python3-yaml is missing (run/install-deps.sh installs it)"; exit 1; }

# Checks on the two files; writes the build stage's RUN commands (one per line), the launcher's
# mpirun options and its fsdpc arguments (one word per line) into $W
python3 - "$W" <<'PY'
import re, shlex, sys, yaml
w = sys.argv[1]
def check(name, ok, detail=""):
    print(("ok - " if ok else "not ok - ") + "container: " + name + ("" if ok else " " + detail))

# Dockerfile: instructions with continuations joined, comments dropped, split into stages
text = re.sub(r"\\\n", " ", "\n".join(l for l in open("Dockerfile").read().split("\n") if not l.lstrip().startswith("#")))
instrs = [l.strip().split(None, 1) for l in text.split("\n") if l.strip()]
stages = []
for ins in instrs:
    if ins[0].upper() == "FROM":
        stages.append({"from": ins[1], "ins": []})
    elif stages:
        stages[-1]["ins"].append((ins[0].upper(), ins[1] if len(ins) > 1 else ""))
check("Dockerfile has a CUDA devel build stage and a CUDA runtime final stage",
      len(stages) == 2 and re.match(r"nvidia/cuda:\S*-devel-\S* AS build$", stages[0]["from"]) is not None
      and re.match(r"nvidia/cuda:\S*-runtime-\S*$", stages[1]["from"]) is not None, str([s["from"] for s in stages]))
installs = [a for s in stages for k, a in s["ins"] if k == "RUN" and
            re.search(r"\b(apt-get|apt|aptitude)\s+(\S+\s+)*install\b|\bdpkg\s+(-i|--install)\b|\bpip3?\s+install\b", a)]
check("Dockerfile installs no package outside run/install-deps.sh", not installs, str(installs))
modes = []
for i, s in enumerate(stages):
    copies = [a.split()[-1] for k, a in s["ins"] if k == "COPY" and a.split()[:1] == ["run/install-deps.sh"]]
    runs = [a for k, a in s["ins"] if k == "RUN"]
    first = runs[0] if runs else ""
    ran = [m.group(1) for d in copies for m in [re.match(r"bash\s+" + re.escape(d) + r"\s+(\w[\w-]*)", first)] if m]
    check(f"stage {i}: COPY run/install-deps.sh, then its first RUN runs that copy", len(copies) == 1 and len(ran) == 1
          and [k for k, _ in s["ins"]].index("COPY") < [k for k, _ in s["ins"]].index("RUN"), f"(COPY to {copies}, first RUN {first!r})")
    modes.append(ran[0] if ran else None)
check("the stages install with the script's build and runtime modes", modes == ["build", "runtime"], str(modes))
build_runs = [a for k, a in stages[0]["ins"] if k == "RUN"] if stages else []
check("the build stage makes fsdpc and lists its runtime packages with libs-of",
      any(re.search(r"\bmake\b.*\bfsdpc\b", r) and "libs-of ./fsdpc" in r for r in build_runs), str(build_runs))
final = stages[-1]["ins"] if stages else []
check("the final stage carries ./fsdpc from the build stage",
      any(k == "COPY" and a.startswith("--from=build") and " /src/fsdpc " in f" {a} " for k, a in final))
open(f"{w}/build-cmds", "w").write("".join(r + "\n" for r in build_runs))

# the MPIJobs: the MPI Operator's (v2beta1) and the training-operator's (v1), the same job
def container(reps, role):
    try:
        return reps[role]["template"]["spec"]["containers"][0]
    except (KeyError, IndexError, TypeError):
        return {}
jobs = {}
for name, version in (("mpijob.yaml", "kubeflow.org/v2beta1"), ("mpijob-v1.yaml", "kubeflow.org/v1")):
    try:
        job = yaml.safe_load(open("run/launch/" + name))
        check(f"{name} parses as YAML", isinstance(job, dict))
    except (OSError, yaml.YAMLError) as e:
        check(f"{name} parses as YAML", False, str(e).replace("\n", " "))
        continue
    if not isinstance(job, dict):
        continue
    jobs[name] = job
    check(f"{name} is a {version} MPIJob", job.get("apiVersion") == version and job.get("kind") == "MPIJob",
          f"({job.get('apiVersion')} {job.get('kind')})")
    spec = job.get("spec", {})
    reps = spec.get("mpiReplicaSpecs", {})
    worker, launcher = container(reps, "Worker"), container(reps, "Launcher")
    res = worker.get("resources", {})
    req, lim = res.get("requests", {}) or {}, res.get("limits", {}) or {}
    for r in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
        n = lim.get(r)
        check(f"{name}: the worker requests and limits {r}", isinstance(n, int) and n > 0 and req.get(r) == n,
              f"(requests {req.get(r)}, limits {n})")
    slots = spec.get("slotsPerWorker")
    check(f"{name}: slotsPerWorker is one rank per requested GPU", slots == lim.get("nvidia.com/gpu"),
          f"({slots} vs {lim.get('nvidia.com/gpu')})")
    check(f"{name}: runPolicy.cleanPodPolicy is set", (spec.get("runPolicy") or {}).get("cleanPodPolicy") in ("Running", "All", "None"))
    if version.endswith("v2beta1"):
        check(f"{name}: workers run sshd for the launcher's mpirun", worker.get("command", [])[:1] == ["/usr/sbin/sshd"])
    else:
        # v1: mpirun reaches the workers through kubectl exec; the operator runs `sleep` in a worker without a command,
        # restartPolicy belongs to the replica spec, and v2beta1's launcherCreationPolicy does not exist
        check(f"{name}: workers run no command of their own (the operator's kubectl exec reaches them)", not worker.get("command"),
              str(worker.get("command")))
        check(f"{name}: the launcher's restartPolicy is its replica spec's, as v1 spells it",
              reps.get("Launcher", {}).get("restartPolicy") == "OnFailure" and
              "restartPolicy" not in reps.get("Launcher", {}).get("template", {}).get("spec", {}))
        check(f"{name}: no v2beta1-only field", "launcherCreationPolicy" not in spec, str(sorted(spec)))
    check(f"{name}: launcher and workers run the same image", launcher.get("image") and launcher.get("image") == worker.get("image"))
    argv = [str(a) for a in (launcher.get("command") or []) + (launcher.get("args") or [])]
    at = argv.index("./fsdpc") if "./fsdpc" in argv else -1
    check(f"{name}: the launcher runs ./fsdpc through mpirun", argv[:1] == ["mpirun"] and at > 0, str(argv[:3]))
    opts = argv[1:at] if at > 0 else []
    np_ = opts[opts.index("-np") + 1] if "-np" in opts[:-1] else None
    check(f"{name}: mpirun -np is workers x slotsPerWorker",
          np_ is not None and slots and int(np_) == reps.get("Worker", {}).get("replicas", 0) * slots, f"(-np {np_})")
    check(f"{name}: mpirun binds no cores and passes FI_PROVIDER=efa", "--bind-to none" in " ".join(opts) and "FI_PROVIDER=efa" in opts)
    i = opts.index("-np") if "-np" in opts else None
    if i is not None:
        del opts[i:i + 2]
    open(f"{w}/{name}.mpirun-opts", "w").write("".join(o + "\n" for o in opts))
    open(f"{w}/{name}.fsdpc-args", "w").write("".join(a + "\n" for a in argv[at + 1:]) if at > 0 else "")
# what the two must share: the image, the launcher's line, the workers' resources, mounts and volumes
if len(jobs) == 2:
    a, b = (jobs[n]["spec"]["mpiReplicaSpecs"] for n in ("mpijob.yaml", "mpijob-v1.yaml"))
    la, lb, wa, wb = container(a, "Launcher"), container(b, "Launcher"), container(a, "Worker"), container(b, "Worker")
    same = {k: (la.get(k), lb.get(k)) for k in ("image", "command", "args", "resources", "workingDir")}
    same.update({"worker " + k: (wa.get(k), wb.get(k)) for k in ("image", "resources", "volumeMounts", "workingDir")})
    same["worker volumes"] = (a["Worker"]["template"]["spec"].get("volumes"), b["Worker"]["template"]["spec"].get("volumes"))
    same["worker replicas"] = (a["Worker"].get("replicas"), b["Worker"].get("replicas"))
    same["slotsPerWorker"] = (jobs["mpijob.yaml"]["spec"].get("slotsPerWorker"), jobs["mpijob-v1.yaml"]["spec"].get("slotsPerWorker"))
    differ = [k for k, (x, y) in same.items() if x != y]
    check("mpijob-v1.yaml runs mpijob.yaml's job: image, launcher line, worker resources, mounts and volumes", not differ,
          f"(differ: {differ})")
PY

# The build stage's commands, as written but for where the script lies, -j1 (2 shared cores here),
# and the script's check mode for its install mode (nothing is installed; every package must be)
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ok=0; n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    cmd=${cmd//\/tmp\/install-deps.sh build/run/install-deps.sh check build}
    cmd=${cmd//-j\"\$(nproc)\"/-j1}
    cmd=${cmd//\/tmp\//$W/}
    cmd=${cmd// && rm -rf \/var\/lib\/apt\/lists\/\*/}
    # the CPU build where this checkout has one (or no CUDA toolkit): rebuilding the other flavor
    # here would replace the ./fsdpc the other suites run
    case "$(cat build/flavor 2>/dev/null)" in build/cpu*) nvcc="" ;; esac
    [ -z "$nvcc" ] && cmd=${cmd//CUDA=1/CUDA=0}
    bash -c "set -e; $cmd" >"$W/build.log" 2>&1 || { ok=1; echo "# build stage command failed: $cmd"; tail -n 5 "$W/build.log" | sed 's/^/#   /'; }
done <"$W/build-cmds"
check "container: the build stage's $n commands run here (install check, make fsdpc, libs-of)" $((ok || n < 2))
# the runtime stage installs what libs-of listed: this binary's libraries, all from packages here
grep -q '^libhdf5-openmpi' "$W/runtime-packages" 2>/dev/null && grep -q '^libopenmpi' "$W/runtime-packages" &&
    ! xargs -r dpkg-query -W -f='${Status}\n' <"$W/runtime-packages" | grep -vq "install ok installed"
check "container: libs-of lists the packages of ./fsdpc's libraries (HDF5, Open MPI), all installed" $? "($(tr '\n' ' ' <"$W/runtime-packages" 2>/dev/null | head -c 200))"
out=$(bash run/install-deps.sh libs-of "$W/nothing" 2>&1)
rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "nothing' is not a file" <<<"$out"
check "container: libs-of of a missing file fails with one line naming it" $? "(rc=$rc: $out)"

# Each launcher's mpirun line, scaled down: 2 ranks, the tiny preset, a small text, 2 steps,
# scratch checkpoints; its own mpirun options (FI_PROVIDER=efa and all) kept
for job in mpijob.yaml mpijob-v1.yaml; do
    [ -s "$W/$job.fsdpc-args" ] || { check "container: $job's launcher runs fsdpc" 1 "(no fsdpc arguments found)"; continue; }
    mapfile -t opts <"$W/$job.mpirun-opts"
    mapfile -t args <"$W/$job.fsdpc-args"
    for ((i = 0; i < ${#args[@]} - 1; i++)); do
        case "${args[i]}" in
            --model_name) args[i + 1]=tiny ;;
            --train_data) args[i + 1]=data/tinyshakespeare.txt ;;
            --max_steps) args[i + 1]=2 ;;
            --checkpoint_dir | --resume_from_checkpoint) args[i + 1]=$W/ckpt-$job ;;
        esac
    done
    $MPI -np 2 "${opts[@]}" ./fsdpc "${args[@]}" --metrics_file "$W/$job.jsonl" >"$W/$job.log" 2>&1
    rc=$?
    [ $rc = 0 ] && [ "$(wc -l <"$W/$job.jsonl")" = 2 ] && [ -n "$(ls -A "$W/ckpt-$job")" ]
    check "container: $job's launcher mpirun line trains (np=2, tiny, 2 steps, checkpoint written)" $? \
        "(rc=$rc: $(grep -m2 -i error "$W/$job.log" | head -c 300))"
done

# run/launch/slurm.sbatch with CONTAINER_IMAGE: srun (a stand-in that prints its arguments) gets
# pyxis's flags and the image's binary; without it, ./fsdpc as before
mkdir -p "$W/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"%s/srun.args"\n' "$W" >"$W/bin/srun"
chmod +x "$W/bin/srun"
PATH=$W/bin:$PATH DATA=d.bin CONTAINER_IMAGE=/fsx/fsdpc.sqsh CONTAINER_MOUNTS=/fsx:/fsx bash run/launch/slurm.sbatch >/dev/null 2>&1
head -n 5 "$W/srun.args" 2>/dev/null | tr '\n' ' ' >"$W/srun.line"
grep -qxF -- "--mpi=pmix --container-image=/fsx/fsdpc.sqsh --container-mounts=/fsx:/fsx --container-workdir=$PWD /opt/fsdpc/fsdpc " "$W/srun.line"
check "container: slurm.sbatch with CONTAINER_IMAGE runs the image's fsdpc through pyxis" $? "($(cat "$W/srun.line"))"
PATH=$W/bin:$PATH DATA=d.bin bash run/launch/slurm.sbatch >/dev/null 2>&1
[ "$(head -n 2 "$W/srun.args" | tr '\n' ' ')" = "--mpi=pmix ./fsdpc " ]
check "container: slurm.sbatch without CONTAINER_IMAGE runs ./fsdpc" $? "($(head -n 2 "$W/srun.args" | tr '\n' ' '))"
