// Proves kube_schema.mjs tells valid manifests from invalid ones: each kind the chart renders passes in a valid
// form, and unknown fields, wrong types, missing required fields, removed API versions, unknown kinds and bad
// names or label values each fail. Run: node tests/deploy/kube_schema_test.mjs
import { parseManifests, validateDocument } from './kube_schema.mjs';

const pod = { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'c', image: 'i', env: [{ name: 'A', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }], resources: { limits: { 'nvidia.com/gpu': 1 } } }] } };
const meta = (name) => ({ name, labels: { 'app.kubernetes.io/name': 'stoker' } });
const valid = [
  { apiVersion: 'apps/v1', kind: 'Deployment', metadata: meta('w'), spec: { selector: { matchLabels: { app: 'x' } }, template: pod } },
  { apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: meta('c'), spec: { serviceName: 'c', selector: { matchLabels: { app: 'x' } }, template: pod, volumeClaimTemplates: [{ metadata: { name: 'j' }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } } }] } },
  { apiVersion: 'v1', kind: 'Service', metadata: meta('s'), spec: { clusterIP: 'None', selector: { app: 'x' }, ports: [{ name: 'm', port: 9401, targetPort: 'metrics' }] } },
  { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', metadata: meta('h'), spec: { scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'w' }, minReplicas: 1, maxReplicas: 4, metrics: [{ type: 'External', external: { metric: { name: 'm' }, target: { type: 'AverageValue', averageValue: '1' } } }] } },
  { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: meta('p'), spec: { maxUnavailable: 1, selector: { matchLabels: { app: 'x' } } } },
  { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: meta('n'), spec: { podSelector: {}, policyTypes: ['Ingress'], ingress: [{ from: [{ namespaceSelector: {} }], ports: [{ port: 'data', protocol: 'TCP' }] }] } },
  { apiVersion: 'batch/v1', kind: 'Job', metadata: meta('j'), spec: { completionMode: 'Indexed', completions: 2, template: { ...pod, spec: { ...pod.spec, restartPolicy: 'OnFailure' } } } },
  { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('d'), data: { 'a.json': '{}' } },
  { apiVersion: 'monitoring.coreos.com/v1', kind: 'ServiceMonitor', metadata: meta('sm'), spec: { selector: { matchLabels: { app: 'x' } }, endpoints: [{ port: 'metrics', relabelings: [{ action: 'replace', targetLabel: 'job', replacement: 'j' }] }] } },
  { apiVersion: 'monitoring.coreos.com/v1', kind: 'PodMonitor', metadata: meta('pm'), spec: { selector: { matchLabels: { app: 'x' } }, namespaceSelector: { any: true }, podMetricsEndpoints: [{ port: 'stoker-metrics' }] } },
  { apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule', metadata: meta('r'), spec: { groups: [{ name: 'g', rules: [{ alert: 'A', expr: 'up == 0', for: '2m', labels: { severity: 'critical' }, annotations: { summary: '{{ $labels.pod }}' } }] }] } },
  { apiVersion: 'keda.sh/v1alpha1', kind: 'ScaledObject', metadata: meta('so'), spec: { scaleTargetRef: { name: 'w' }, minReplicaCount: 1, triggers: [{ type: 'prometheus', name: 't', metricType: 'Value', metadata: { serverAddress: 'http://p:9090', query: 'up', threshold: '1' } }] } },
];
const broken = (doc, change) => { const d = structuredClone(doc); change(d); return d; };
const invalid = [
  ['unknown container field', broken(valid[0], (d) => { d.spec.template.spec.containers[0].imagePullPolicyy = 'Always'; }), /imagePullPolicyy: unknown field/],
  ['unknown spec field', broken(valid[1], (d) => { d.spec.replica = 1; }), /spec\.replica: unknown field/],
  ['unknown CRD field', broken(valid[8], (d) => { d.spec.endpoints[0].intervall = '15s'; }), /intervall: unknown field/],
  ['wrong type', broken(valid[0], (d) => { d.spec.replicas = 'two'; }), /replicas must be integer/],
  ['missing container name', broken(valid[0], (d) => { delete d.spec.template.spec.containers[0].name; }), /required property '?name'?/],
  ['missing HPA maxReplicas', broken(valid[3], (d) => { delete d.spec.maxReplicas; }), /maxReplicas/],
  ['removed autoscaling/v2beta2', { ...valid[3], apiVersion: 'autoscaling/v2beta2' }, /not served/],
  ['removed policy/v1beta1', { ...valid[4], apiVersion: 'policy/v1beta1' }, /not served/],
  ['unknown kind', { ...valid[0], kind: 'Deploymnet' }, /no kind Deploymnet/],
  ['bad label value', broken(valid[0], (d) => { d.metadata.labels.bad = 'has space'; }), /not a valid label value/],
  ['Service name too long', broken(valid[2], (d) => { d.metadata.name = 'x'.repeat(64); }), /not a valid DNS label/],
  ['upper-case name', broken(valid[7], (d) => { d.metadata.name = 'Dash'; }), /not a valid DNS subdomain/],
];

let failures = 0;
for (const doc of valid) {
  const errors = await validateDocument(doc);
  if (errors.length) { failures++; console.log(`FAIL valid ${doc.kind} rejected: ${errors.join('; ')}`); }
}
for (const [name, doc, expected] of invalid) {
  const errors = await validateDocument(doc);
  if (!errors.some((e) => expected.test(e))) { failures++; console.log(`FAIL ${name} not caught (${errors.join('; ') || 'no errors'})`); }
}
const parsed = parseManifests('---\n# comment only\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n');
if (parsed.length !== 1) { failures++; console.log(`FAIL parseManifests kept ${parsed.length} documents`); }
console.log(`kube_schema: ${valid.length} valid kinds accepted, ${invalid.length} kinds of error caught, ${failures} failures`);
process.exit(failures ? 1 : 0);
