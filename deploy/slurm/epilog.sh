#!/bin/sh
# flexgate Slurm epilog: tell this node's flexgate-agent that a job has ended on some GPUs.
#
# Why: caps belong to jobs. When a job ends mid-event, the agent drops its GPUs from every lease
# and writes back their pre-event power limits, so the next job does not inherit a cap and the
# gateway can re-plan the freed budget. GPUs no lease holds are left alone.
#
# Install (slurm.conf, on every GPU node; slurmd runs it as root):
#     Prolog=/etc/slurm/flexgate-prolog.sh
#     Epilog=/etc/slurm/flexgate-epilog.sh
# and write /etc/flexgate/agent.env (root-owned, mode 0600 or 0644):
#     FLEXGATE_AGENT_URL=http://127.0.0.1:9450
#     FLEXGATE_AGENT_TOKEN_FILE=/etc/flexgate/agent.token
#     FLEXGATE_HOOK_TIMEOUT=3            # optional: seconds for the whole call (default 3)
# The token file holds the agent's control token (root-owned, mode 0600).
#
# Inputs from slurmd: SLURM_JOB_ID, and SLURM_JOB_GPUS (comma-separated GRES indices, e.g.
# "0,1,2"; the agent matches them to GPU minor numbers, i.e. /dev/nvidiaN). A job without GPUs
# has no SLURM_JOB_GPUS and nothing is sent.
#
# Failure policy: by default this script exits 0 even when the agent cannot be reached, and
# logs the problem (syslog tag "flexgate-epilog", and stderr into slurmd's log). The cap still
# ends: every cap belongs to a lease with a deadline, and the agent restores pre-event limits
# when it expires (the dead-man switch) or when it restarts after the deadline. Sites that would
# rather keep the node out of service until the cap is surely gone set
#     FLEXGATE_EPILOG_STRICT=1
# in the env file: a failed call then exits 1, and slurmd drains the node.
#
# Security: the token is never put on a command line (where `ps` would show it): it is fed to
# curl's header reader on stdin by the shell's built-in printf. The env file is parsed, not
# sourced, so a stray command in it is never executed as root.
#
# POSIX sh (dash); needs curl. Override the env file path with FLEXGATE_AGENT_ENV (for tests).

TAG=flexgate-epilog
ACTION=end

log() {
    # syslog if available (daemon facility), and stderr for slurmd's log.
    logger -t "$TAG" -p daemon.warning -- "$*" 2>/dev/null || true
    printf '%s: %s\n' "$TAG" "$*" >&2
}

STRICT=0

# Log, then exit 0 (or 1 when strict, which makes slurmd drain the node).
give_up() {
    if [ "$STRICT" = 1 ]; then
        log "$*; job ${SLURM_JOB_ID:-?}: GPUs may still be capped until the lease expires; failing (FLEXGATE_EPILOG_STRICT=1)"
        exit 1
    fi
    log "$*; job ${SLURM_JOB_ID:-?}: GPUs may still be capped until the lease expires"
    exit 0
}

ENV_FILE=${FLEXGATE_AGENT_ENV:-/etc/flexgate/agent.env}
URL=
TOKEN_FILE=
TIMEOUT=3

# Parse KEY=VALUE lines (comments and unknown keys ignored, optional surrounding quotes).
if [ -r "$ENV_FILE" ]; then
    while IFS='=' read -r key value || [ -n "$key" ]; do
        value=${value#\"}; value=${value%\"}
        value=${value#\'}; value=${value%\'}
        case $key in
            FLEXGATE_AGENT_URL) URL=$value ;;
            FLEXGATE_AGENT_TOKEN_FILE) TOKEN_FILE=$value ;;
            FLEXGATE_HOOK_TIMEOUT) TIMEOUT=$value ;;
            FLEXGATE_EPILOG_STRICT) STRICT=$value ;;
        esac
    done < "$ENV_FILE"
else
    give_up "cannot read $ENV_FILE"
fi

[ -n "${SLURM_JOB_ID:-}" ] || give_up "SLURM_JOB_ID is not set (not run by slurmd?)"
# No GPUs in this job: nothing to tell the agent.
[ -n "${SLURM_JOB_GPUS:-}" ] || exit 0

# Validate inputs before they go into a URL or JSON.
case $SLURM_JOB_ID in
    *[!0-9A-Za-z_.+-]*) give_up "unexpected SLURM_JOB_ID '$SLURM_JOB_ID'" ;;
esac
case $SLURM_JOB_GPUS in
    *[!0-9,]* | ,* | *, | *,,*) give_up "unexpected SLURM_JOB_GPUS '$SLURM_JOB_GPUS'" ;;
esac
case $TIMEOUT in
    '' | *[!0-9]*) TIMEOUT=3 ;;
esac
[ -n "$URL" ] || give_up "FLEXGATE_AGENT_URL is not set in $ENV_FILE"
[ -n "$TOKEN_FILE" ] || give_up "FLEXGATE_AGENT_TOKEN_FILE is not set in $ENV_FILE"
[ -r "$TOKEN_FILE" ] || give_up "cannot read the token file $TOKEN_FILE"
command -v curl >/dev/null 2>&1 || give_up "curl not found"

# First non-empty line of the token file, without surrounding whitespace.
TOKEN=$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$TOKEN_FILE" | head -n 1)
[ -n "$TOKEN" ] || give_up "the token file $TOKEN_FILE is empty"

BODY="{\"gpus\":[$SLURM_JOB_GPUS]}"
ENDPOINT="${URL%/}/v1/jobs/$SLURM_JOB_ID/$ACTION"

# -sS: quiet but show errors; short connect timeout so a dead agent costs at most TIMEOUT s.
# The last output line is the HTTP status; curl's own failure leaves it at 000.
RESPONSE=$(printf 'Authorization: Bearer %s\n' "$TOKEN" |
    curl -sS --connect-timeout 1 --max-time "$TIMEOUT" -X POST \
        -H @- -H 'Content-Type: application/json' --data "$BODY" \
        -w '\n%{http_code}' "$ENDPOINT" 2>&1)
STATUS=$(printf '%s\n' "$RESPONSE" | tail -n 1)

case $STATUS in
    2??) exit 0 ;;
    *) give_up "POST $ENDPOINT failed (HTTP $STATUS): $(printf '%s\n' "$RESPONSE" | sed '$d' | tr '\n' ' ' | cut -c1-500)" ;;
esac
