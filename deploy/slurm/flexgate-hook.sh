# shellcheck shell=sh
# Shared body of flexgate's Slurm prolog and epilog (sourced by both; not run by itself).
#
# The caller sets TAG (syslog tag), ACTION (start|end: the agent endpoint), defines `give_up MESSAGE`
# and `after_success` (run once the agent took the call: the job's throughput token),
# (how a failure ends: the prolog never fails the job, the epilog fails
# only when FLEXGATE_EPILOG_STRICT=1). This file reads the env file, checks every input before
# it goes into a URL or JSON, and POSTs {gpus:[...]} to the local agent's
# /v1/jobs/$SLURM_JOB_ID/$ACTION.

# shellcheck disable=SC2034 # STRICT is read by the epilog's give_up
STRICT=0

log() {
    # syslog if available (daemon facility), and stderr for slurmd's log.
    logger -t "$TAG" -p daemon.warning -- "$*" 2>/dev/null || true
    printf '%s: %s\n' "$TAG" "$*" >&2
}

ENV_FILE=${FLEXGATE_AGENT_ENV:-/etc/flexgate/agent.env}
URL=
TOKEN_FILE=
TIMEOUT=3
CACERT=
CERT=
KEY=
# Where the prolog leaves each job its throughput token (for deploy/slurm/task-prolog.sh), and
# the agent binary that derives it; empty JOB_TOKEN_DIR: no tokens.
JOB_TOKEN_DIR=
AGENT_BIN=flexgate-agent

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
            FLEXGATE_AGENT_CACERT) CACERT=$value ;;
            FLEXGATE_AGENT_CERT) CERT=$value ;;
            FLEXGATE_AGENT_KEY) KEY=$value ;;
            FLEXGATE_JOB_TOKEN_DIR) JOB_TOKEN_DIR=$value ;;
            FLEXGATE_AGENT_BIN) AGENT_BIN=$value ;;
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

# TLS to an agent started with --tls-cert/--tls-key (https:// URL): the CA that signs its
# certificate (else the system trust store), and a client certificate where the agent demands one
# (--tls-client-ca). Passed to curl as positional parameters, so paths with spaces stay whole.
set --
if [ -n "$CACERT" ]; then
    [ -r "$CACERT" ] || give_up "cannot read FLEXGATE_AGENT_CACERT $CACERT"
    set -- "$@" --cacert "$CACERT"
fi
if [ -n "$CERT" ] || [ -n "$KEY" ]; then
    if [ -z "$CERT" ] || [ -z "$KEY" ]; then
        give_up "FLEXGATE_AGENT_CERT and FLEXGATE_AGENT_KEY go together"
    fi
    [ -r "$CERT" ] || give_up "cannot read FLEXGATE_AGENT_CERT $CERT"
    [ -r "$KEY" ] || give_up "cannot read FLEXGATE_AGENT_KEY $KEY"
    set -- "$@" --cert "$CERT" --key "$KEY"
fi

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
        -w '\n%{http_code}' "$@" "$ENDPOINT" 2>&1)
STATUS=$(printf '%s\n' "$RESPONSE" | tail -n 1)

case $STATUS in
    2??)
        after_success
        exit 0
        ;;
    *) give_up "POST $ENDPOINT failed (HTTP $STATUS): $(printf '%s\n' "$RESPONSE" | sed '$d' | tr '\n' ' ' | cut -c1-500)" ;;
esac
