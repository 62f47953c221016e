// Validates Kubernetes manifests against the API schema of their kind and apiVersion, strictly: the npm
// kubernetes-models validators (generated from the Kubernetes OpenAPI spec, plus the Prometheus Operator's and
// KEDA's CRDs) check types and required fields; on top, every field the validator never looked at is reported as
// unknown (the generated validators accept extra fields, the API server would drop or reject them), and only API
// versions a Kubernetes >= 1.29 cluster serves are accepted (autoscaling/v2beta2 or policy/v1beta1 are errors).
//
//   import { parseManifests, validateDocument } from './kube_schema.mjs';
//   node tests/deploy/kube_schema.mjs FILE...     (or - for stdin): prints each document, exits 1 on any error
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';

// apiVersion -> the package directory of its models. Only versions served by Kubernetes >= 1.29 (the chart's
// kubeVersion) and the CRDs the chart may render.
const SERVED = {
  'v1': 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'batch/v1': 'kubernetes-models/batch/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
  'autoscaling/v1': 'kubernetes-models/autoscaling/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'rbac.authorization.k8s.io/v1': 'kubernetes-models/rbac.authorization.k8s.io/v1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
  'keda.sh/v1alpha1': '@kubernetes-models/keda/keda.sh/v1alpha1',
};
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
// Kinds whose names become DNS labels (Service names are host names; the others' names are used in pod names).
const LABEL_NAMED = new Set(['Service', 'StatefulSet', 'Deployment', 'Job', 'Namespace']);

const models = new Map();
async function modelFor(apiVersion, kind) {
  const dir = SERVED[apiVersion];
  if (!dir) return { error: `apiVersion ${apiVersion} is not served by Kubernetes >= 1.29 (removed, or not a known CRD)` };
  const key = `${apiVersion}/${kind}`;
  if (!models.has(key)) {
    try {
      models.set(key, (await import(`${dir}/${kind}`))[kind]);
    } catch {
      models.set(key, undefined);
    }
  }
  const model = models.get(key);
  return model ? { model } : { error: `${apiVersion} has no kind ${kind}` };
}

// Runs the model's validator over a proxy of the document that records which fields it reads. A field of an
// object whose keys the validator never enumerated (so not a free-form map) and never read is unknown.
function strictValidate(Model, doc) {
  const read = new Map();
  const enumerated = new Set();
  const paths = new Map();
  const proxies = new Map();
  const wrap = (obj, path) => {
    if (obj === null || typeof obj !== 'object') return obj;
    if (!proxies.has(obj)) {
      paths.set(obj, path);
      read.set(obj, new Set());
      proxies.set(obj, new Proxy(obj, {
        get(target, key, receiver) {
          if (typeof key === 'string') read.get(target).add(key);
          return wrap(Reflect.get(target, key, receiver), `${path}.${String(key)}`);
        },
        has(target, key) {
          if (typeof key === 'string') read.get(target).add(key);
          return Reflect.has(target, key);
        },
        ownKeys(target) {
          enumerated.add(target);
          return Reflect.ownKeys(target);
        },
      }));
    }
    return proxies.get(obj);
  };
  const errors = [];
  const data = structuredClone(doc);
  try {
    Model.prototype.validate.call(wrap(data, ''));
  } catch (e) {
    errors.push(e.message.replace(/^data/, ''));
  }
  for (const [obj, keys] of read) {
    if (Array.isArray(obj) || enumerated.has(obj)) continue;
    for (const key of Object.keys(obj)) {
      if (!keys.has(key)) errors.push(`${paths.get(obj) || '.'}${paths.get(obj) ? '.' : ''}${key}: unknown field`);
    }
  }
  return errors;
}

function metadataErrors(doc) {
  const errors = [];
  const name = doc.metadata?.name ?? '';
  const limit = LABEL_NAMED.has(doc.kind) ? 63 : 253;
  if (!(LABEL_NAMED.has(doc.kind) ? DNS_LABEL : DNS_SUBDOMAIN).test(name) || name.length > limit) {
    errors.push(`metadata.name "${name}" is not a valid ${limit === 63 ? 'DNS label' : 'DNS subdomain'}`);
  }
  for (const [where, labels] of [['metadata.labels', doc.metadata?.labels],
    ['spec.template.metadata.labels', doc.spec?.template?.metadata?.labels]]) {
    for (const [key, value] of Object.entries(labels || {})) {
      if (typeof value !== 'string' || value.length > 63 || !LABEL_VALUE.test(value)) {
        errors.push(`${where}.${key}: "${value}" is not a valid label value`);
      }
    }
  }
  return errors;
}

// Errors of one manifest (empty: valid).
export async function validateDocument(doc) {
  if (!doc || typeof doc !== 'object' || !doc.apiVersion || !doc.kind) return ['not a Kubernetes object (no apiVersion/kind)'];
  const { model, error } = await modelFor(doc.apiVersion, doc.kind);
  if (error) return [error];
  return [...strictValidate(model, doc), ...metadataErrors(doc)];
}

// Multi-document YAML -> objects (empty documents skipped); a YAML error throws with its position.
export function parseManifests(text) {
  return parseAllDocuments(text).map((d) => {
    if (d.errors.length) throw new Error(`YAML: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((d) => d !== null && d !== undefined);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  let bad = 0;
  for (const file of process.argv.slice(2)) {
    for (const doc of parseManifests(readFileSync(file === '-' ? 0 : file, 'utf8'))) {
      const errors = await validateDocument(doc);
      const what = `${doc.kind}/${doc.metadata?.name} (${doc.apiVersion})`;
      console.log(errors.length ? `FAIL ${what}\n  ${errors.join('\n  ')}` : `ok   ${what}`);
      if (errors.length) bad++;
    }
  }
  process.exit(bad ? 1 : 0);
}
