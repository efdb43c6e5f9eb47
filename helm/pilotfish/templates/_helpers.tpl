{{/*
Shared pieces of every Pilotfish object. Each component template composes these so that the contract with
the CLI (image, environment, catalog mount, writable directories, security settings) is written once.
*/}}

{{/* The chart name, overridable so two charts of the same name do not collide. */}}
{{- define "pilotfish.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: the release name, with the chart name appended unless the release name
already contains it. Truncated so that the longest suffix ("-redis-headless", 15 characters) still fits
the 63-character DNS label limit of Service names.
*/}}
{{- define "pilotfish.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pilotfish.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable for the life of a release (a Deployment's selector is immutable), so they hold
only the name, the instance and the component. Call with (dict "ctx" $ "component" "matcher").
*/}}
{{- define "pilotfish.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pilotfish.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The standard labels of every object. Call with (dict "ctx" $ "component" "matcher"). */}}
{{- define "pilotfish.labels" -}}
helm.sh/chart: {{ include "pilotfish.chart" .ctx }}
{{ include "pilotfish.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: pilotfish
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The Pilotfish image; the tag defaults to the chart's appVersion so chart and code move together. */}}
{{- define "pilotfish.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "pilotfish.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pilotfish.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Keep a generated secret value stable across upgrades: reuse the value already stored in the cluster
(lookup), generate one only on first install. Offline rendering (helm template) has no cluster, so it
generates a fresh value each time. Call with (dict "ctx" $ "name" SECRET "key" KEY "length" N).
*/}}
{{- define "pilotfish.storedOrRandom" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name }}
{{- if and $existing $existing.data (hasKey $existing.data .key) }}
{{- index $existing.data .key | b64dec }}
{{- else }}
{{- randAlphaNum (int .length) }}
{{- end }}
{{- end }}

{{/* Name and key of the Secret holding pf-control's password (the bundled store). */}}
{{- define "pilotfish.redis.secretName" -}}
{{- default (printf "%s-redis" (include "pilotfish.fullname" .)) .Values.redis.auth.existingSecret }}
{{- end }}

{{- define "pilotfish.redis.secretKey" -}}
{{- if .Values.redis.auth.existingSecret }}{{ .Values.redis.auth.existingSecretKey }}{{ else }}redis-password{{ end }}
{{- end }}

{{/* Name and key of the Secret holding pf-pilot-<vo>'s password (the bundled store). */}}
{{- define "pilotfish.redis.pilotSecretName" -}}
{{- default (printf "%s-redis-pilot" (include "pilotfish.fullname" .)) .Values.redis.auth.pilot.existingSecret }}
{{- end }}

{{- define "pilotfish.redis.pilotSecretKey" -}}
{{- if .Values.redis.auth.pilot.existingSecret }}{{ .Values.redis.auth.pilot.existingSecretKey }}{{ else }}redis-password{{ end }}
{{- end }}

{{/* Name and key of the Secret holding the external Redis URL of the control plane. */}}
{{- define "pilotfish.externalRedis.secretName" -}}
{{- default (printf "%s-external-redis" (include "pilotfish.fullname" .)) .Values.externalRedis.existingSecret }}
{{- end }}

{{- define "pilotfish.externalRedis.secretKey" -}}
{{- if .Values.externalRedis.existingSecret }}{{ .Values.externalRedis.existingSecretKey }}{{ else }}redis-url{{ end }}
{{- end }}

{{/* Name and key of the Secret holding the external Redis URL of the pilots. */}}
{{- define "pilotfish.externalRedis.pilotSecretName" -}}
{{- default (printf "%s-external-redis-pilot" (include "pilotfish.fullname" .)) .Values.externalRedis.pilot.existingSecret }}
{{- end }}

{{- define "pilotfish.externalRedis.pilotSecretKey" -}}
{{- if .Values.externalRedis.pilot.existingSecret }}{{ .Values.externalRedis.pilot.existingSecretKey }}{{ else }}redis-url{{ end }}
{{- end }}

{{/* Name and key of the Secret holding Celery's broker URL apart from the store, and of the pilots' one. */}}
{{- define "pilotfish.broker.secretName" -}}
{{- default (printf "%s-broker" (include "pilotfish.fullname" .)) .Values.externalRedis.broker.existingSecret }}
{{- end }}

{{- define "pilotfish.broker.secretKey" -}}
{{- if .Values.externalRedis.broker.existingSecret }}{{ .Values.externalRedis.broker.existingSecretKey }}{{ else }}broker-url{{ end }}
{{- end }}

{{- define "pilotfish.broker.pilotSecretName" -}}
{{- default (printf "%s-broker-pilot" (include "pilotfish.fullname" .)) .Values.externalRedis.broker.pilot.existingSecret }}
{{- end }}

{{- define "pilotfish.broker.pilotSecretKey" -}}
{{- if .Values.externalRedis.broker.pilot.existingSecret }}{{ .Values.externalRedis.broker.pilot.existingSecretKey }}{{ else }}broker-url{{ end }}
{{- end }}

{{/* "true" when Celery's broker is a Redis apart from the store (externalRedis.broker). */}}
{{- define "pilotfish.brokerApart" -}}
{{- $b := .Values.externalRedis.broker }}
{{- if and (not .Values.redis.enabled) (or $b.url $b.existingSecret) }}true{{ end }}
{{- end }}

{{/* "true" when the external store is a Redis Cluster (its URL says so, or externalRedis.cluster). */}}
{{- define "pilotfish.storeIsCluster" -}}
{{- $ext := .Values.externalRedis }}
{{- if and (not .Values.redis.enabled) (or $ext.cluster (regexMatch "^rediss?\\+cluster://" $ext.url)) }}true{{ end }}
{{- end }}

{{/*
"true" when the pilots have credentials of their own: always with the bundled store (its pf-pilot-<vo> user),
with an external Redis only when externalRedis.pilot is set. Otherwise pilots get the control plane's URL.
*/}}
{{- define "pilotfish.pilotsHaveOwnUser" -}}
{{- if or .Values.redis.enabled .Values.externalRedis.pilot.url .Values.externalRedis.pilot.existingSecret }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding Flower's basic-auth credentials. */}}
{{- define "pilotfish.flower.secretName" -}}
{{- default (printf "%s-flower" (include "pilotfish.fullname" .)) .Values.flower.auth.existingSecret }}
{{- end }}

{{/*
Refuse a configuration that would start components with no Redis to talk to, or that would hand a pilot pod
a Secret holding the control plane's credentials, naming the values to set.
*/}}
{{- define "pilotfish.checkRedis" -}}
{{- $ext := .Values.externalRedis }}
{{- if and (not .Values.redis.enabled) (not $ext.url) (not $ext.existingSecret) }}
{{- fail "redis.enabled is false: set externalRedis.url, or externalRedis.existingSecret (with externalRedis.existingSecretKey), to the Redis the components should use" }}
{{- end }}
{{- $broker := $ext.broker }}
{{- if and .Values.redis.enabled (or $ext.url $ext.existingSecret $ext.pilot.url $ext.pilot.existingSecret $ext.cluster $broker.url $broker.existingSecret $broker.pilot.url $broker.pilot.existingSecret) }}
{{- fail "externalRedis is set while redis.enabled is true: set redis.enabled=false to use the external Redis, or clear externalRedis" }}
{{- end }}
{{- if and .Values.redis.auth.existingSecret (eq .Values.redis.auth.existingSecret .Values.redis.auth.pilot.existingSecret) }}
{{- fail "redis.auth.pilot.existingSecret names the Secret of pf-control's password (redis.auth.existingSecret): the pilots' password needs a Secret of its own, so that pilot pods never reference the control plane's" }}
{{- end }}
{{- if and $ext.existingSecret (eq $ext.existingSecret $ext.pilot.existingSecret) }}
{{- fail "externalRedis.pilot.existingSecret names the Secret of the control plane's URL (externalRedis.existingSecret): the pilots' URL needs a Secret of its own, so that pilot pods never reference the control plane's" }}
{{- end }}
{{- if and (include "pilotfish.storeIsCluster" .) (not (include "pilotfish.brokerApart" .)) }}
{{- fail "externalRedis names a Redis Cluster, which Celery's Redis transport cannot use as its broker: set externalRedis.broker.url, or externalRedis.broker.existingSecret, to a standalone (redis://) or Sentinel-managed (sentinel://) Redis" }}
{{- end }}
{{- if and $broker.existingSecret (has $broker.existingSecret (list $broker.pilot.existingSecret $ext.pilot.existingSecret)) }}
{{- fail "externalRedis.broker.existingSecret is also a pilots' Secret: the broker URL with the control plane's credentials needs a Secret of its own, so that pilot pods never reference it" }}
{{- end }}
{{- end }}

{{/*
The Redis credentials of a process, as JSON: "files", the Secret keys its pod mounts ({secret, key, path}), and
"urls", the URLs an init container composes from a mounted password (the bundled store: {password, user,
path}). Never an environment variable: a process's environment is readable by every process of its user
(/proc/<pid>/environ), so each URL reaches it as a file (PILOTFISH_<SETTING>_FILE, taskqueues/settings.py).
Call with (dict "ctx" $ "role" ROLE):
  control   the control plane (matcher workers, beat, Flower, metrics): redis_url as pf-control, broker_url;
  director  the same, plus pilot_redis_url and pilot_broker_url, the pilots' URLs it hands to the pilots it starts;
  pilot     a pilot pod: redis_url (and broker_url) as the pilots' user, and nothing of the control plane's.
A file's path names the setting it holds in that pod (a pilot's own URL is its redis_url); the control plane's
files are redis_url, broker_url and redis_password, so that scripts/helm_check.py can tell them apart. An
external Redis without externalRedis.pilot gives pilots the control plane's URL (NOTES.txt says so).
*/}}
{{- define "pilotfish.credentials" -}}
{{- $ := .ctx }}
{{- include "pilotfish.checkRedis" $ }}
{{- $control := ne .role "pilot" }}
{{- $pilotPath := ternary "redis_url" "pilot_redis_url" (eq .role "pilot") }}
{{- $files := list }}
{{- $urls := list }}
{{- if $.Values.redis.enabled }}
{{- $where := printf "%s-redis:%d/%d" (include "pilotfish.fullname" $) (int $.Values.redis.service.port) (int $.Values.redis.database) }}
{{- if $control }}
{{- $files = append $files (dict "secret" (include "pilotfish.redis.secretName" $) "key" (include "pilotfish.redis.secretKey" $) "path" "redis_password") }}
{{- $urls = append $urls (dict "password" "redis_password" "user" (include "pilotfish.redis.controlUser" $) "where" $where "path" "redis_url") }}
{{- end }}
{{- if ne .role "control" }}
{{- $files = append $files (dict "secret" (include "pilotfish.redis.pilotSecretName" $) "key" (include "pilotfish.redis.pilotSecretKey" $) "path" "pilot_redis_password") }}
{{- $urls = append $urls (dict "password" "pilot_redis_password" "user" (include "pilotfish.redis.pilotUser" $) "where" $where "path" $pilotPath) }}
{{- end }}
{{- else }}
{{- $own := include "pilotfish.pilotsHaveOwnUser" $ }}
{{- if or $control (not $own) }}
{{- $files = append $files (dict "secret" (include "pilotfish.externalRedis.secretName" $) "key" (include "pilotfish.externalRedis.secretKey" $) "path" "redis_url") }}
{{- end }}
{{- if and $own (ne .role "control") }}
{{- $files = append $files (dict "secret" (include "pilotfish.externalRedis.pilotSecretName" $) "key" (include "pilotfish.externalRedis.pilotSecretKey" $) "path" $pilotPath) }}
{{- end }}
{{- end }}
{{- if include "pilotfish.brokerApart" $ }}
{{- if $control }}
{{- $files = append $files (dict "secret" (include "pilotfish.broker.secretName" $) "key" (include "pilotfish.broker.secretKey" $) "path" "broker_url") }}
{{- end }}
{{- $pb := $.Values.externalRedis.broker.pilot }}
{{- if and (or $pb.url $pb.existingSecret) (ne .role "control") }}
{{- $files = append $files (dict "secret" (include "pilotfish.broker.pilotSecretName" $) "key" (include "pilotfish.broker.pilotSecretKey" $) "path" (ternary "broker_url" "pilot_broker_url" (eq .role "pilot"))) }}
{{- end }}
{{- end }}
{{- dict "files" $files "urls" $urls | toJson }}
{{- end }}

{{/* Where a Pilotfish container finds its credentials' files (a tmpfs the sandboxed payloads never see: /run). */}}
{{- define "pilotfish.credentialsDir" -}}
/run/pilotfish/credentials
{{- end }}

{{/*
The variables naming a process's URL files: PILOTFISH_REDIS_URL_FILE... (taskqueues/settings.py reads them; for
a pilot, pilot/agent/command.py). Call as pilotfish.credentials.
*/}}
{{- define "pilotfish.redisEnv" -}}
{{- $c := include "pilotfish.credentials" . | fromJson }}
{{- range concat $c.files $c.urls }}
{{- if hasSuffix "_url" .path }}
- name: {{ printf "PILOTFISH_%s_FILE" (upper .path) }}
  value: {{ printf "%s/%s" (include "pilotfish.credentialsDir" $) .path | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The volumes holding a process's credentials: its Secrets' keys of its role only, as read-only files of mode 0400
(defaultMode 256). With the bundled store they hold passwords, from which an init container
(pilotfish.credentialsInit) writes the URLs into an in-memory emptyDir; otherwise they are the URLs themselves.
Call as pilotfish.credentials.
*/}}
{{- define "pilotfish.credentialVolumes" -}}
{{- $c := include "pilotfish.credentials" . | fromJson }}
- name: {{ ternary "credential-secrets" "credentials" (gt (len $c.urls) 0) }}
  projected:
    defaultMode: 256
    sources:
      {{- range $c.files }}
      - secret:
          name: {{ .secret }}
          items:
            - key: {{ .key }}
              path: {{ .path }}
      {{- end }}
{{- if $c.urls }}
- name: credentials
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- end }}

{{/* The mount of a Pilotfish container's credentials (read-only). Call with the root context. */}}
{{- define "pilotfish.credentialMount" -}}
- name: credentials
  mountPath: {{ include "pilotfish.credentialsDir" . }}
  readOnly: true
{{- end }}

{{/*
The init container that writes the bundled store's URLs from the passwords mounted as files, so that no
password passes through an environment variable or a command line (it is read with `read`, and printf is a
shell builtin). Nothing when the URLs are Secrets themselves. Call as pilotfish.credentials.
*/}}
{{- define "pilotfish.credentialsInit" -}}
{{- $ := .ctx }}
{{- $c := include "pilotfish.credentials" . | fromJson }}
{{- if $c.urls }}
{{- $dir := include "pilotfish.credentialsDir" $ }}
{{- $script := list "set -eu" "umask 077" }}
{{- range $c.urls }}
{{- $script = append $script (printf "IFS= read -r password < /run/pilotfish/secrets/%s || [ -n \"$password\" ]" .password) }}
{{- $script = append $script (printf "printf '%%s%%s:%%s@%%s\\n' redis:// %s \"$password\" %s > %s/%s" (squote .user) (squote .where) $dir .path) }}
{{- end }}
- name: credentials
  image: {{ include "pilotfish.image" $ | quote }}
  imagePullPolicy: {{ $.Values.image.pullPolicy }}
  command: ["sh", "-c", {{ join "\n" $script | quote }}]
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      cpu: 100m
      memory: 32Mi
  securityContext:
    {{- include "pilotfish.containerSecurityContext" $ | nindent 4 }}
  volumeMounts:
    - name: credential-secrets
      mountPath: /run/pilotfish/secrets
      readOnly: true
    - name: credentials
      mountPath: {{ $dir }}
{{- end }}
{{- end }}

{{/*
The environment every Pilotfish process gets: the contract with the CLI. Call with (dict "ctx" $ "role" ROLE),
ROLE as in pilotfish.redisEnv. PILOTFISH_BEAT_DIRECTOR is false because the director is its own Deployment
(director.enabled): left at its default (true), beat would schedule `pilotfish.director` and a matcher worker
would run a second director, whose local pilots would start inside the worker's pod.
*/}}
{{- define "pilotfish.env" -}}
{{- $ := .ctx -}}
{{ include "pilotfish.redisEnv" . | trim }}
- name: PILOTFISH_CATALOG
  value: /etc/pilotfish/catalog.toml
- name: PILOTFISH_BEAT_DIRECTOR
  value: "false"
- name: PILOTFISH_VO
  value: {{ $.Values.vo | quote }}
- name: PILOTFISH_PREFIX
  value: {{ $.Values.prefix | quote }}
{{- if and (not $.Values.redis.enabled) $.Values.externalRedis.sentinelMaster }}
- name: PILOTFISH_REDIS_SENTINEL_MASTER
  value: {{ $.Values.externalRedis.sentinelMaster | quote }}
{{- end }}
- name: PILOTFISH_STATE_DIR
  value: {{ $.Values.stateDir | quote }}
- name: TMPDIR
  value: /tmp
- name: HOME
  value: /tmp
{{- with $.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Pod annotations that change whenever an input the processes read only at start changes (the catalog, the
Redis credentials), so that `helm upgrade` rolls the pods. The credentials are hashed from the values,
not from the rendered Secret, because a generated password must not roll the pods on every upgrade. A pilot
pod hashes only what it reads (the pilots' credentials), so a new control-plane password does not drain the
pilots. Call with (dict "ctx" $ "role" ROLE), ROLE as in pilotfish.redisEnv.
*/}}
{{- define "pilotfish.checksums" -}}
{{- $ := .ctx }}
{{- $auth := list $.Values.redis.enabled $.Values.redis.auth $.Values.externalRedis }}
{{- if and (eq .role "pilot") (include "pilotfish.pilotsHaveOwnUser" $) }}
{{- $auth = list $.Values.redis.enabled $.Values.redis.auth.pilot $.Values.externalRedis.pilot $.Values.externalRedis.broker.pilot }}
{{- end }}
checksum/catalog: {{ $.Values.catalog | sha256sum }}
checksum/redis-auth: {{ $auth | toJson | sha256sum }}
{{- end }}

{{/* Pod-level security settings, shared by every pod of the chart. */}}
{{- define "pilotfish.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end }}

{{/* Container-level security settings, shared by every container of the chart. */}}
{{- define "pilotfish.containerSecurityContext" -}}
{{ toYaml .Values.containerSecurityContext }}
{{- end }}

{{/*
The mounts of every Pilotfish container: the catalog (read-only), and the only writable places, /tmp
and the state dir, since the root filesystem is read-only.
*/}}
{{- define "pilotfish.volumeMounts" -}}
- name: catalog
  mountPath: /etc/pilotfish
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: state
  mountPath: {{ .Values.stateDir }}
{{- end }}

{{/* The volumes behind pilotfish.volumeMounts. Call with (dict "ctx" $ "stateSize" "1Gi"). */}}
{{- define "pilotfish.volumes" -}}
- name: catalog
  configMap:
    name: {{ include "pilotfish.fullname" .ctx }}-catalog
    items:
      - key: catalog.toml
        path: catalog.toml
- name: tmp
  emptyDir:
    sizeLimit: {{ .ctx.Values.tmpSizeLimit }}
- name: state
  emptyDir:
    {{- with .stateSize }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}

{{/* Scheduling and pull settings common to every pod. */}}
{{- define "pilotfish.podCommon" -}}
serviceAccountName: {{ include "pilotfish.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- include "pilotfish.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The probes of a Pilotfish process. Liveness asks whether this pod's own process beat recently in Redis
(alive AND doing its work; a sibling replica's beat does not count, see taskqueues/store/alive.py); readiness
asks whether Redis answers; the startup probe gives the first beat time before liveness counts. Call
with (dict "ctx" $ "component" "worker").
*/}}
{{- define "pilotfish.probes" -}}
{{- $p := .ctx.Values.probes }}
startupProbe:
  exec:
    command: ["pilotfish", "health", "--component", {{ .component | quote }}]
  periodSeconds: {{ $p.startup.periodSeconds }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
livenessProbe:
  exec:
    command: ["pilotfish", "health", "--component", {{ .component | quote }}]
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
readinessProbe:
  exec:
    command: ["pilotfish", "health", "--redis"]
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end }}

{{/*
The pod template of a Pilotfish process. Call with (dict "ctx" $ "component" LABEL "health" HEALTH
"args" LIST "resources" MAP "stateSize" QUANTITY "role" ROLE "extra" MAP "env" LIST), "health" being the
component whose own heartbeat the probes check (`pilotfish health --component HEALTH`), "role" which Redis
credentials it gets (pilotfish.redisEnv; default control), "extra" optional pod-spec fields, "env" optional
extra environment variables.
*/}}
{{- define "pilotfish.processPod" -}}
metadata:
  labels:
    {{- include "pilotfish.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
  annotations:
    {{- include "pilotfish.checksums" (dict "ctx" .ctx "role" (default "control" .role)) | nindent 4 }}
    {{- with .ctx.Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- include "pilotfish.podCommon" .ctx | nindent 2 }}
  {{- with .extra }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with include "pilotfish.credentialsInit" (dict "ctx" .ctx "role" (default "control" .role)) }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "pilotfish.image" .ctx | quote }}
      imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
      args:
        {{- toYaml .args | nindent 8 }}
      workingDir: {{ .ctx.Values.stateDir }}
      env:
        {{- include "pilotfish.env" (dict "ctx" .ctx "role" (default "control" .role)) | nindent 8 }}
        {{- with .env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- include "pilotfish.probes" (dict "ctx" .ctx "component" .health) | trim | nindent 6 }}
      resources:
        {{- toYaml .resources | nindent 8 }}
      securityContext:
        {{- include "pilotfish.containerSecurityContext" .ctx | nindent 8 }}
      volumeMounts:
        {{- include "pilotfish.volumeMounts" .ctx | nindent 8 }}
        {{- include "pilotfish.credentialMount" .ctx | nindent 8 }}
  volumes:
    {{- include "pilotfish.volumes" (dict "ctx" .ctx "stateSize" .stateSize) | nindent 4 }}
    {{- include "pilotfish.credentialVolumes" (dict "ctx" .ctx "role" (default "control" .role)) | nindent 4 }}
{{- end }}

{{/*
A pilot pod's name and node, from the downward API: the pilot is `k8s-<pod>@<node>`, a name its liveness
probe derives from the same variables to find the pilot's own heartbeat (pilot/agent/config.py).
*/}}
{{- define "pilotfish.pilotEnv" -}}
- name: PILOTFISH_PAYLOAD_SANDBOX
  value: {{ .Values.pilots.payloadSandbox | default "bwrap" | quote }}
- name: PILOTFISH_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PILOTFISH_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}

{{/*
The resources of a pilot pod: requests equal limits, so the pod holds exactly the queue's shape and gets
the Guaranteed QoS class (it is not the first evicted under node pressure).
*/}}
{{- define "pilotfish.pilotResources" -}}
{{- $r := .Values.pilots.resources }}
requests:
  cpu: {{ $r.cpu | quote }}
  memory: {{ $r.memory | quote }}
  ephemeral-storage: {{ $r.ephemeralStorage | quote }}
limits:
  cpu: {{ $r.cpu | quote }}
  memory: {{ $r.memory | quote }}
  ephemeral-storage: {{ $r.ephemeralStorage | quote }}
{{- end }}
