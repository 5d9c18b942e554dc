#!/bin/sh
# flexgate Slurm TaskProlog: hand the job's tasks their throughput token, so that
# deploy/flexgate_throughput.py reports the job's tokens/s to this node's agent.
#
# Install (slurm.conf): TaskProlog=/etc/slurm/flexgate-task-prolog.sh, with the prolog's
# FLEXGATE_JOB_TOKEN_DIR set in /etc/flexgate/agent.env (the prolog, as root, writes
# DIR/$SLURM_JOB_ID.token owned by the job's user, mode 0400). slurmd runs this script as the
# job's user and exports every `export NAME=value` line it prints into the task's environment.
#
# It reads nothing but that one file, prints the token only when it is what `flexgate-agent
# job-token` writes (64 hex digits: nothing in it can be a shell command), and never fails the
# task: without a token the job reports nothing and its throughput stays unknown to the gateway.
#
# POSIX sh. FLEXGATE_JOB_TOKEN_DIR in the environment overrides the default (for tests).

DIR=${FLEXGATE_JOB_TOKEN_DIR:-/run/flexgate/jobs}
case ${SLURM_JOB_ID:-} in
    '' | *[!0-9A-Za-z_.+-]*) exit 0 ;;
esac
FILE="$DIR/$SLURM_JOB_ID.token"
[ -r "$FILE" ] || exit 0
TOKEN=$(head -n 1 "$FILE")
case $TOKEN in
    '' | *[!0-9a-f]*) exit 0 ;;
esac
[ "${#TOKEN}" -eq 64 ] || exit 0
printf 'export FLEXGATE_JOB_TOKEN=%s\n' "$TOKEN"
printf 'export FLEXGATE_JOB_ID=%s\n' "$SLURM_JOB_ID"
exit 0
