{{/*
The bundled store's two ACL users, as taskqueues/store/access.py defines them outside Kubernetes: the control plane's
pf-control (everything) and the pilots' pf-pilot-<vo>. tests/test_helm.py renders these rules and compares
them with taskqueues.store.access, in text and as a real server reads them, so the two cannot drift apart.
*/}}

{{- define "pilotfish.redis.controlUser" -}}
pf-control
{{- end }}

{{- define "pilotfish.redis.pilotUser" -}}
{{- printf "pf-pilot-%s" .Values.vo }}
{{- end }}

{{/* access.control_rules(). */}}
{{- define "pilotfish.redis.controlRules" -}}
resetkeys ~* resetchannels &* +@all
{{- end }}

{{/*
access.pilot_rules(prefix, vo, db) followed by the selectors access.apply(..., broker=True) adds on
Redis >= 7 / Valkey: the community's keys, its wake, release and pilot channels, Celery's event channels of
this database, the pilot's commands (PILOT_SESSION_COMMANDS, which end with fcall, then PILOT_DATA_COMMANDS,
without repeats); then the broker commands (PILOT_BROKER_COMMANDS) on the broker keys (BROKER_KEYS) only, and
listening (PIDBOX_COMMANDS), never publishing, on Celery's broadcast channel. No first-argument rule
(deprecated), no eval, evalsha or script.
*/}}
{{- define "pilotfish.redis.pilotRules" -}}
{{- $base := printf "%s:{%s}:" .Values.prefix .Values.vo }}
{{- $db := int .Values.redis.database }}
{{- $session := list "ping" "hello" "auth" "select" "quit" "echo" "client|setname" "client|setinfo" "client|getname" "client|id" "multi" "exec" "discard" "time" "subscribe" "unsubscribe" "psubscribe" "punsubscribe" "fcall" }}
{{- $data := list "hget" "hset" "hsetnx" "hmget" "hdel" "zadd" "zrem" "zrange" "zrangebyscore" "zscore" "zcard" "zcount" "smembers" "sadd" "incr" "incrby" "exists" "publish" "hincrby" "hincrbyfloat" }}
{{- $broker := list "smembers" "lpush" }}
{{- $brokerKeys := list "%R~_kombu.binding.reply.celery.pidbox" "~[^_]*.reply.celery.pidbox*" }}
{{- $pidbox := list "subscribe" "psubscribe" "unsubscribe" "punsubscribe" }}
{{- $rules := list "resetkeys" (printf "~%s*" $base) "resetchannels" (printf "&%swake:*" $base) (printf "&%srelease" $base) (printf "&%sctl:*" $base) (printf "&/%d.celeryev/*" $db) "-@all" }}
{{- range uniq (concat $session $data) }}
{{- $rules = append $rules (printf "+%s" .) }}
{{- end }}
{{- $selector := $brokerKeys }}
{{- range $broker }}
{{- $selector = append $selector (printf "+%s" .) }}
{{- end }}
{{- $listen := list (printf "&/%d.celery.pidbox" $db) }}
{{- range $pidbox }}
{{- $listen = append $listen (printf "+%s" .) }}
{{- end }}
{{- printf "%s (%s) (%s)" (join " " $rules) (join " " $selector) (join " " $listen) }}
{{- end }}

{{/*
The store container's entry point (POSIX sh; the arguments are the server's options). It runs valkey-server
when the image has it, else redis-server, refuses a server older than 7.2 (the pilots' rules need ACL
selectors, and CLIENT SETINFO, which Redis 7.0 and 7.1 do not know), writes the users
file into the container's /tmp (the default user off, the two users with the SHA-256 of their passwords from
the environment, which the kubelet takes from the Secrets) and execs the server on it. Hashing happens here,
not in Helm, so that a password the chart never sees (an existingSecret) works the same; printf is a shell
builtin, so no password ever appears in a process's arguments. The rules are in the pod spec: changing them
(vo, prefix, database, a new chart) restarts the pod.
*/}}
{{- define "pilotfish.redis.start" -}}
set -eu
server=$(command -v valkey-server || command -v redis-server) || {
  echo "pilotfish: the image has neither valkey-server nor redis-server" >&2; exit 1; }
version=$("$server" --version)
major=$(echo "$version" | sed -n 's/.* v=\([0-9]*\)\.\([0-9]*\)\..*/\1/p')
minor=$(echo "$version" | sed -n 's/.* v=\([0-9]*\)\.\([0-9]*\)\..*/\2/p')
if [ "${major:-0}" -lt 7 ] || { [ "$major" -eq 7 ] && [ "${minor:-0}" -lt 2 ]; }; then
  echo "pilotfish: $version: the store needs Redis >= 7.2 or Valkey >= 7.2 (the pilots' user has an ACL" \
    "selector and CLIENT SETINFO)" >&2
  exit 1
fi
umask 077
acl="${TMPDIR:-/tmp}/users.acl"
hash() { printf '%s' "$1" | sha256sum | cut -d ' ' -f 1; }
{
  printf 'user default off\n'
  printf 'user %s on #%s %s\n' "$CONTROL_USER" "$(hash "$CONTROL_PASSWORD")" "$CONTROL_RULES"
  printf 'user %s on #%s %s\n' "$PILOT_USER" "$(hash "$PILOT_PASSWORD")" "$PILOT_RULES"
} > "$acl"
exec "$server" "$@" --aclfile "$acl"
{{- end }}

{{/*
A probe of the store: PING as pf-control with valkey-cli (redis-cli in a Redis image), the password passed in
REDISCLI_AUTH (valkey-cli reads VALKEYCLI_AUTH, else REDISCLI_AUTH; redis-cli reads REDISCLI_AUTH), never on
the command line. Call with the regular expression the answer must match.
*/}}
{{- define "pilotfish.redis.ping" -}}
{{- printf "cli=$(command -v valkey-cli || command -v redis-cli) && REDISCLI_AUTH=\"$CONTROL_PASSWORD\" \"$cli\" --user \"$CONTROL_USER\" -p 6379 ping | grep -qE '%s'" . }}
{{- end }}
