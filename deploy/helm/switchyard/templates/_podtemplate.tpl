{{/* The controller pod template, shared by the DaemonSet and the Deployment.
It carries no checksum of the ConfigMap: the controller applies ConfigMap
edits live, so an edit must not restart pods (TestHelmConfigEditKeepsPods). */}}
{{- define "switchyard.controller.podTemplate" -}}
{{- $c := .Values.controller -}}
metadata:
  labels:
    {{- include "switchyard.selectorLabels" . | nindent 4 }}
    app.kubernetes.io/component: controller
    {{- with $c.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $c.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $c.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "switchyard.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  terminationGracePeriodSeconds: {{ $c.terminationGracePeriodSeconds }}
  {{- with $c.dnsConfig }}
  dnsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.hostname }}
  hostname: {{ toYaml . }}
  {{- end }}
  {{- with $c.hostAliases }}
  hostAliases:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  dnsPolicy: {{ $c.dnsPolicy }}
  {{- if $c.hostNetwork }}
  hostNetwork: true
  {{- end }}
  {{- if $c.shareProcessNamespace }}
  shareProcessNamespace: true
  {{- end }}
  {{- with $c.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  {{- with $c.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.affinity }}
  affinity:
    {{- tpl (toYaml .) $ | nindent 4 }}
  {{- end }}
  {{- with $c.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- tpl (toYaml .) $ | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if $c.podSecurityContext }}
    {{- toYaml $c.podSecurityContext | nindent 4 }}
    {{- else }}
    runAsNonRoot: true
    runAsUser: {{ $c.image.runAsUser }}
    runAsGroup: {{ $c.image.runAsGroup }}
    seccompProfile:
      type: RuntimeDefault
    {{- end }}
    {{- if $c.sysctls }}
    sysctls:
    {{- range $name, $value := $c.sysctls }}
    - name: {{ $name | quote }}
      value: {{ $value | quote }}
    {{- end }}
    {{- end }}
  {{- with $c.extraInitContainers }}
  initContainers:
    {{- tpl (toYaml .) $ | nindent 4 }}
  {{- end }}
  containers:
  - name: {{ $c.containerName }}
    image: {{ include "switchyard.image" (dict "image" $c.image "global" .Values.global) | quote }}
    imagePullPolicy: {{ $c.image.pullPolicy }}
    args:
      {{- include "switchyard.args" . | nindent 6 }}
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- with $c.extraEnvs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $c.lifecycle }}
    lifecycle:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    ports:
    - name: http
      containerPort: {{ $c.containerPort.http }}
      protocol: TCP
      {{- if $c.hostPort.enabled }}
      hostPort: {{ $c.hostPort.ports.http }}
      {{- end }}
    - name: https
      containerPort: {{ $c.containerPort.https }}
      protocol: TCP
      {{- if $c.hostPort.enabled }}
      hostPort: {{ $c.hostPort.ports.https }}
      {{- end }}
    - name: {{ $c.metrics.portName }}
      containerPort: {{ $c.metrics.port }}
      protocol: TCP
    {{- if $c.admissionWebhooks.enabled }}
    - name: webhook
      containerPort: {{ $c.admissionWebhooks.port }}
      protocol: TCP
    {{- end }}
    {{- range $key, $value := .Values.tcp }}
    - name: {{ include "switchyard.l4PortName" (dict "prefix" $.Values.portNamePrefix "port" $key "proto" "tcp") }}
      containerPort: {{ $key }}
      protocol: TCP
      {{- if $c.hostPort.enabled }}
      hostPort: {{ $key }}
      {{- end }}
    {{- end }}
    {{- range $key, $value := .Values.udp }}
    - name: {{ include "switchyard.l4PortName" (dict "prefix" $.Values.portNamePrefix "port" $key "proto" "udp") }}
      containerPort: {{ $key }}
      protocol: UDP
      {{- if $c.hostPort.enabled }}
      hostPort: {{ $key }}
      {{- end }}
    {{- end }}
    {{- with $c.livenessProbe }}
    livenessProbe:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $c.readinessProbe }}
    readinessProbe:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $c.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $c.resizePolicy }}
    resizePolicy:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      {{- if $c.containerSecurityContext }}
      {{- toYaml $c.containerSecurityContext | nindent 6 }}
      {{- else }}
      {{- include "switchyard.containerSecurityContext" $c.image | nindent 6 }}
      {{- end }}
    {{- if or $c.admissionWebhooks.enabled $c.extraVolumeMounts }}
    volumeMounts:
    {{- if $c.admissionWebhooks.enabled }}
    - name: webhook-cert
      mountPath: {{ dir $c.admissionWebhooks.certificate }}
      readOnly: true
    {{- end }}
    {{- with $c.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
  {{- with $c.extraContainers }}
  {{- tpl (toYaml .) $ | nindent 2 }}
  {{- end }}
  {{- if or $c.admissionWebhooks.enabled $c.extraVolumes }}
  volumes:
  {{- if $c.admissionWebhooks.enabled }}
  - name: webhook-cert
    secret:
      secretName: {{ default (include "switchyard.admission.fullname" .) $c.admissionWebhooks.existingSecret }}
      items:
      - key: tls.crt
        path: {{ base $c.admissionWebhooks.certificate }}
      - key: tls.key
        path: {{ base $c.admissionWebhooks.key }}
  {{- end }}
  {{- with $c.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- end }}
{{- end -}}
