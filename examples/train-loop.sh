#!/bin/sh
# train-loop.sh: a training loop in plain shell that survives preemption.
#
# It resumes from its checkpoint file, does one "step" of work per
# iteration, asks syncpoint at every step whether this is the step every
# task checkpoints at before a preemption, and if so saves and exits. Run it
# under preemptwatch, which restarts it (or lets the scheduler restart it)
# with the checkpoint in place:
#
#   preemptwatch -t worker:0 -- examples/train-loop.sh
#
# Environment: CKPT (checkpoint file, default ./ckpt.$MUSTER_TASK), STEPS
# (steps to train, default 100), STEP_TIME (seconds per step, default 0.1),
# START_DELAY (seconds of start-up before the first step, as a framework's
# import would take; default 0).
set -eu

task=${MUSTER_TASK:-local}
ckpt=${CKPT:-./ckpt.$task}
steps=${STEPS:-100}
step_time=${STEP_TIME:-0.1}
start_delay=${START_DELAY:-0}

step=0
if [ -f "$ckpt" ]; then
	step=$(cat "$ckpt")
	echo "$task: resuming from step $step"
fi

sleep "$start_delay"
while [ "$step" -lt "$steps" ]; do
	sleep "$step_time"              # the work of one step
	step=$((step + 1))
	if syncpoint "$step"; then
		echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
		echo "$task: preemption: checkpointed at step $step"
		exit 0
	fi
done
echo "$steps" > "$ckpt"
echo "$task: finished $steps steps"
