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

# The rest is shared with the epilog.
# shellcheck source=deploy/slurm/flexgate-hook.sh
. "$(dirname "$0")/flexgate-hook.sh"
