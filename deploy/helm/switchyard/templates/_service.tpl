{{/* A controller Service. Call with (dict "root" $ "svc" <values> "name"
<name> "labels" <extra labels> "ports" <ports> "targetPorts" <targetPorts>
"nodePorts" <nodePorts> "type" <type>). */}}
{{- define "switchyard.controller.service" -}}
{{- $root := .root -}}
{{- $s := .svc -}}
{{- $type := .type -}}
{{- $setNodePorts := or (eq $type "NodePort") (eq $type "LoadBalancer") -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  namespace: {{ include "switchyard.namespace" $root }}
  labels:
    {{- include "switchyard.labels" $root | nindent 4 }}
    app.kubernetes.io/component: controller
    {{- with $root.Values.controller.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $root.Values.controller.service.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with .labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $s.annotations }}
  annotations:
    {{- tpl (toYaml .) $root | nindent 4 }}
  {{- end }}
spec:
  type: {{ $type }}
  {{- with $s.clusterIP }}
  clusterIP: {{ . }}
  {{- end }}
  {{- with $s.clusterIPs }}
  clusterIPs:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.externalIPs }}
  externalIPs:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq $type "LoadBalancer" }}
  {{- with $s.loadBalancerIP }}
  loadBalancerIP: {{ . }}
  {{- end }}
  {{- with $s.loadBalancerSourceRanges }}
  loadBalancerSourceRanges:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.loadBalancerClass }}
  loadBalancerClass: {{ . }}
  {{- end }}
  {{- if hasKey $s "allocateLoadBalancerNodePorts" }}
  allocateLoadBalancerNodePorts: {{ $s.allocateLoadBalancerNodePorts }}
  {{- end }}
  {{- end }}
  {{- if $setNodePorts }}
  {{- with $s.externalTrafficPolicy }}
  externalTrafficPolicy: {{ . }}
  {{- end }}
  {{- if and (eq $type "LoadBalancer") (eq (toString $s.externalTrafficPolicy) "Local") $s.healthCheckNodePort }}
  healthCheckNodePort: {{ $s.healthCheckNodePort }}
  {{- end }}
  {{- end }}
  {{- with $s.sessionAffinity }}
  sessionAffinity: {{ . }}
  {{- end }}
  {{- with $s.trafficDistribution }}
  trafficDistribution: {{ . }}
  {{- end }}
  {{- with $s.ipFamilyPolicy }}
  ipFamilyPolicy: {{ . }}
  {{- end }}
  {{- with $s.ipFamilies }}
  ipFamilies:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    {{- include "switchyard.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: controller
  ports:
  {{- if $root.Values.controller.service.enableHttp }}
  - name: http
    port: {{ .ports.http }}
    protocol: TCP
    targetPort: {{ .targetPorts.http }}
    {{- if $s.appProtocol }}
    appProtocol: http
    {{- end }}
    {{- if and $setNodePorts .nodePorts.http }}
    nodePort: {{ .nodePorts.http }}
    {{- end }}
  {{- end }}
  {{- if $root.Values.controller.service.enableHttps }}
  - name: https
    port: {{ .ports.https }}
    protocol: TCP
    targetPort: {{ .targetPorts.https }}
    {{- if $s.appProtocol }}
    appProtocol: https
    {{- end }}
    {{- if and $setNodePorts .nodePorts.https }}
    nodePort: {{ .nodePorts.https }}
    {{- end }}
  {{- end }}
  {{- $np := .nodePorts -}}
  {{- range $key, $value := $root.Values.tcp }}
  {{- $pn := include "switchyard.l4PortName" (dict "prefix" $root.Values.portNamePrefix "port" $key "proto" "tcp") }}
  - name: {{ $pn }}
    port: {{ $key }}
    protocol: TCP
    targetPort: {{ $pn }}
    {{- if and $setNodePorts $np.tcp (index $np.tcp $key) }}
    nodePort: {{ index $np.tcp $key }}
    {{- end }}
  {{- end }}
  {{- range $key, $value := $root.Values.udp }}
  {{- $pn := include "switchyard.l4PortName" (dict "prefix" $root.Values.portNamePrefix "port" $key "proto" "udp") }}
  - name: {{ $pn }}
    port: {{ $key }}
    protocol: UDP
    targetPort: {{ $pn }}
    {{- if and $setNodePorts $np.udp (index $np.udp $key) }}
    nodePort: {{ index $np.udp $key }}
    {{- end }}
  {{- end }}
{{- end -}}
