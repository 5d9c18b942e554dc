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
#     # For an agent serving TLS (FLEXGATE_AGENT_URL=https://127.0.0.1:9450), optional:
#     FLEXGATE_AGENT_CACERT=/etc/flexgate/agents-ca.pem   # CA of the agent's certificate
#     FLEXGATE_AGENT_CERT=/etc/flexgate/hook.pem          # client certificate, where the agent
#     FLEXGATE_AGENT_KEY=/etc/flexgate/hook-key.pem       #   demands one (--tls-client-ca)
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

# shellcheck disable=SC2034 # TAG and ACTION are read by flexgate-hook.sh
TAG=flexgate-epilog
ACTION=end

# Log, then exit 0 (or 1 when strict, which makes slurmd drain the node).
give_up() {
    if [ "$STRICT" = 1 ]; then
        log "$*; job ${SLURM_JOB_ID:-?}: GPUs may still be capped until the lease expires; failing (FLEXGATE_EPILOG_STRICT=1)"
        exit 1
    fi
    log "$*; job ${SLURM_JOB_ID:-?}: GPUs may still be capped until the lease expires"
    exit 0
}

# After the agent took the call: the job's throughput token (if the prolog left one) goes too.
after_success() {
    [ -n "$JOB_TOKEN_DIR" ] || return 0
    rm -f "$JOB_TOKEN_DIR/$SLURM_JOB_ID.token"
}

# The rest is shared with the prolog.
# shellcheck source=deploy/slurm/flexgate-hook.sh
. "$(dirname "$0")/flexgate-hook.sh"
