#!/bin/sh
# flexgate Slurm prolog: tell this node's flexgate-agent that a job starts on some GPUs.
#
# Why: a demand-response event may be running when a job starts. If the gateway's lease on this
# node sets `new_job_cap_w`, the agent caps the new job's GPUs at that value at once (and
# makes them part of the lease, so they are restored when it ends or expires). Without such a
# lease the call changes nothing.
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
#     # Optional: give each job its throughput token (see task-prolog.sh and
#     # deploy/flexgate_throughput.py): written to DIR/$SLURM_JOB_ID.token, owned by the job's
#     # user, mode 0400, removed by the epilog. FLEXGATE_AGENT_BIN defaults to flexgate-agent.
#     FLEXGATE_JOB_TOKEN_DIR=/run/flexgate/jobs
#     FLEXGATE_AGENT_BIN=/usr/local/bin/flexgate-agent
# The token file holds the agent's control token (root-owned, mode 0600).
#
# Inputs from slurmd: SLURM_JOB_ID, and SLURM_JOB_GPUS (comma-separated GRES indices, e.g.
# "0,1,2"; the agent matches them to GPU minor numbers, i.e. /dev/nvidiaN). A job without GPUs
# has no SLURM_JOB_GPUS and nothing is sent.
#
# Failure policy: this script NEVER fails the job. A non-zero prolog exit would requeue the job
# and drain the node, so if the agent is down, slow, or refuses, the problem is logged (syslog
# tag "flexgate-prolog", and stderr into slurmd's log) and the script exits 0. The job then
# simply runs uncapped, which is also what happens when no event is active.
#
# Security: the token is never put on a command line (where `ps` would show it): it is fed to
# curl's header reader on stdin by the shell's built-in printf. The env file is parsed, not
# sourced, so a stray command in it is never executed as root.
#
# POSIX sh (dash); needs curl. Override the env file path with FLEXGATE_AGENT_ENV (for tests).

# shellcheck disable=SC2034 # TAG and ACTION are read by flexgate-hook.sh
TAG=flexgate-prolog
ACTION=start

# Leave quietly but successfully: the job must start whatever happens here.
give_up() {
    log "$*; job ${SLURM_JOB_ID:-?} continues without a flexgate call"
    exit 0
}

# After the agent took the call: the job's own throughput token, readable by the job's user
# only (it is good for that job's POST /v1/jobs/{id}/throughput and nothing else). A failure
# here is logged and the job runs; it then reports no throughput, which the gateway calls
# unknown.
after_success() {
    [ -n "$JOB_TOKEN_DIR" ] || return 0
    command -v "$AGENT_BIN" >/dev/null 2>&1 || { log "$AGENT_BIN not found: no throughput token for job $SLURM_JOB_ID"; return 0; }
    mkdir -p "$JOB_TOKEN_DIR" || { log "cannot create $JOB_TOKEN_DIR"; return 0; }
    file="$JOB_TOKEN_DIR/$SLURM_JOB_ID.token"
    (
        umask 077
        "$AGENT_BIN" job-token --token-file "$TOKEN_FILE" "$SLURM_JOB_ID" >"$file.tmp"
    ) || { log "flexgate-agent job-token failed for job $SLURM_JOB_ID"; rm -f "$file.tmp"; return 0; }
    if [ -n "${SLURM_JOB_UID:-}" ]; then
        chown "$SLURM_JOB_UID" "$file.tmp" || { log "cannot give $file to uid $SLURM_JOB_UID"; rm -f "$file.tmp"; return 0; }
    fi
    if ! { chmod 0400 "$file.tmp" && mv -f "$file.tmp" "$file"; }; then
        log "cannot write $file"
        rm -f "$file.tmp"
    fi
}

# The rest is shared with the epilog.
# shellcheck source=deploy/slurm/flexgate-hook.sh
. "$(dirname "$0")/flexgate-hook.sh"
