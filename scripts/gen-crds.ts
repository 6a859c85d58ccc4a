// `npm run gen-crds`: CustomResourceDefinitions for the kinds sallyport reads
// that no upstream project installs, GENERATED from schemas/ so the two never
// drift (test/kube/gen-crds.test.ts fails when deploy/crds/ is stale).
//
// The JSON Schemas are richer than a CRD's structural OpenAPI v3 schema may be,
// so the conversion keeps what the API server can check cheaply (types,
// properties, required, enums, bounds, patterns) and drops the rest — unions
// (oneOf/anyOf/if-then-else), $ref cycles, patternProperties — leaving those
// subtrees as x-kubernetes-preserve-unknown-fields. sallyport validates every
// object against the full schema itself (validate/), and an invalid object gets
// Accepted=False with the field named; the CRD schema only keeps the grossest
// mistakes out of etcd.
//
//   node scripts/gen-crds.ts           write deploy/crds/*.yaml
//   node scripts/gen-crds.ts --check   exit 1 if they are out of date

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { stringify } from 'yaml'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const SCHEMAS = path.join(ROOT, 'schemas')
export const CRD_DIR = path.join(ROOT, 'deploy', 'crds')

type Json = Record<string, unknown>

interface CrdSpec {
  readonly group: string
  readonly version: string
  readonly kind: string
  readonly plural: string
  readonly shortNames: readonly string[]
  /** Schema references whose `spec` (and status) are merged (one Backend CRD for both published shapes). */
  readonly schemas: readonly string[]
  /** *.k8s.io groups are protected: the API server wants this annotation. */
  readonly approval?: string
  readonly note: string
}

export const CRDS: readonly CrdSpec[] = [
  {
    group: 'sallyport.io', version: 'v1alpha1', kind: 'EgressExtension', plural: 'egressextensions', shortNames: ['egx'],
    schemas: ['egressextension.json'],
    note: 'sallyport\'s own kind: egress extensions at Gateway or Route scope.',
  },
  {
    group: 'gateway.networking.k8s.io', version: 'v1alpha1', kind: 'Backend', plural: 'backends', shortNames: [],
    schemas: ['backend.json#/$defs/egress', 'backend.json#/$defs/gep4488'],
    approval: 'unapproved, experimental-only; sallyport ships this until Gateway API publishes GEP-4488 Backend',
    note: 'Backend of the Gateway API egress proposal and GEP-4488 (both shapes). Install it only if your cluster has no backends.gateway.networking.k8s.io CRD.',
  },
]

const files = new Map<string, Json>()
function loadSchema(file: string): Json {
  let s = files.get(file)
  if (s === undefined) files.set(file, s = JSON.parse(fs.readFileSync(path.join(SCHEMAS, file), 'utf8')) as Json)
  return s
}

function resolveRef(ref: string, base: string): { node: Json; file: string } {
  const [filePart, pointer = ''] = ref.split('#')
  const file = filePart === '' || filePart === undefined ? base : filePart
  let node: unknown = loadSchema(file)
  for (const part of pointer.split('/').filter((p) => p !== '')) node = (node as Json)[part.replace(/~1/g, '/').replace(/~0/g, '~')]
  if (node === undefined) throw new Error(`unresolvable $ref ${ref} in ${base}`)
  return { node: node as Json, file }
}

const KEEP = ['description', 'minLength', 'maxLength', 'pattern', 'minimum', 'maximum', 'minItems', 'maxItems', 'exclusiveMinimum', 'exclusiveMaximum']
const PRESERVE: Json = { 'x-kubernetes-preserve-unknown-fields': true }

/** JSON Schema node → structural OpenAPI v3 node. */
function convert(node: Json, file: string, stack: readonly string[]): Json {
  if (typeof node.$ref === 'string') {
    const key = `${node.$ref.startsWith('#') ? file : ''}${node.$ref}`
    if (stack.includes(key) || stack.length > 24) return { ...PRESERVE }
    const { node: target, file: targetFile } = resolveRef(node.$ref, file)
    const { $ref: _ref, ...rest } = node
    return convert({ ...target, ...rest }, targetFile, [...stack, key])
  }
  const out: Json = {}
  let type = node.type
  if (Array.isArray(type)) {
    const real = type.filter((t) => t !== 'null')
    if (real.length !== 1) return { ...PRESERVE }
    if (type.includes('null')) out.nullable = true
    type = real[0]
  }
  if (node.const !== undefined) { out.enum = [node.const]; type ??= typeOf(node.const) }
  if (Array.isArray(node.enum)) {
    const values = node.enum.filter((v) => v !== null)
    out.enum = values
    type ??= typeOf(values[0])
  }
  // Unions: merge the object branches' properties (no `required`: it differs per branch).
  const branches = [...(Array.isArray(node.oneOf) ? node.oneOf : []), ...(Array.isArray(node.anyOf) ? node.anyOf : []), ...(Array.isArray(node.allOf) ? node.allOf : [])] as Json[]
  let properties = node.properties as Record<string, Json> | undefined
  if (branches.length > 0) {
    const merged: Record<string, Json> = { ...(properties ?? {}) }
    for (const b of branches) {
      const c = convert(b, file, stack)
      if (c.type === 'object' && typeof c.properties === 'object') Object.assign(merged, mergeBranch(merged, c.properties as Record<string, Json>))
      else if (c.type !== undefined && type === undefined && branches.length === 1) type = c.type
    }
    if (Object.keys(merged).length > 0) { properties = undefined; out.properties = merged; type ??= 'object' }
  }
  if (type === undefined) return Object.keys(out).length > 0 && out.enum !== undefined ? { ...PRESERVE } : { ...PRESERVE }
  out.type = type
  for (const k of KEEP) if (node[k] !== undefined) out[k] = node[k]
  if (type === 'string' && node.format === 'date-time') out.format = 'date-time'
  if (type === 'array') out.items = node.items === undefined || typeof node.items !== 'object' ? { ...PRESERVE } : convert(node.items as Json, file, stack)
  if (type === 'object') {
    if (properties !== undefined) {
      const props: Record<string, Json> = {}
      for (const [k, v] of Object.entries(properties)) props[k] = convert(v, file, stack)
      out.properties = { ...(out.properties as Json | undefined ?? {}), ...props }
    }
    if (Array.isArray(node.required) && branches.length === 0 && out.properties !== undefined) {
      const req = (node.required as string[]).filter((r) => (out.properties as Json)[r] !== undefined)
      if (req.length > 0) out.required = req
    }
    if (typeof node.additionalProperties === 'object' && node.additionalProperties !== null && out.properties === undefined) {
      out.additionalProperties = convert(node.additionalProperties as Json, file, stack)
    }
    if (out.properties === undefined && out.additionalProperties === undefined) Object.assign(out, PRESERVE)
  }
  return out
}

function mergeBranch(into: Record<string, Json>, add: Record<string, Json>): Record<string, Json> {
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(add)) {
    const have = into[k]
    if (have === undefined) { out[k] = v; continue }
    if (have.type === 'object' && v.type === 'object' && have.properties !== undefined && v.properties !== undefined) {
      const { required: _a, ...h } = have
      out[k] = { ...h, properties: { ...(have.properties as Json), ...mergeBranch(have.properties as Record<string, Json>, v.properties as Record<string, Json>) } }
    } else if (JSON.stringify(have) !== JSON.stringify(v)) {
      out[k] = { ...PRESERVE } // two shapes disagree: let sallyport's validation judge
    }
  }
  return out
}

function typeOf(v: unknown): string | undefined {
  if (typeof v === 'string') return 'string'
  if (typeof v === 'boolean') return 'boolean'
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number'
  return undefined
}

function specSchema(crd: CrdSpec): Json {
  const specs: Record<string, Json> = {}
  for (const ref of crd.schemas) {
    const [file, pointer] = ref.split('#') as [string, string | undefined]
    const root = pointer === undefined ? loadSchema(file) : resolveRef(`#${pointer}`, file).node
    const converted = convert(root, file, [])
    const props = (converted.properties ?? {}) as Record<string, Json>
    if (props.spec !== undefined) specs[ref] = props.spec
  }
  const list = Object.values(specs)
  if (list.length === 1) return list[0] as Json
  let merged: Record<string, Json> = {}
  for (const s of list) merged = { ...merged, ...mergeBranch(merged, (s.properties ?? {}) as Record<string, Json>) }
  return { type: 'object', properties: merged }
}

export function crdDocument(crd: CrdSpec): Json {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: `${crd.plural}.${crd.group}`,
      labels: { 'app.kubernetes.io/name': 'sallyport', 'app.kubernetes.io/component': 'crd' },
      ...(crd.approval === undefined ? {} : { annotations: { 'api-approved.kubernetes.io': crd.approval } }),
    },
    spec: {
      group: crd.group,
      scope: 'Namespaced',
      names: {
        kind: crd.kind, listKind: `${crd.kind}List`, plural: crd.plural, singular: crd.kind.toLowerCase(),
        ...(crd.shortNames.length > 0 ? { shortNames: [...crd.shortNames] } : {}),
        categories: ['sallyport'],
      },
      versions: [{
        name: crd.version, served: true, storage: true,
        subresources: { status: {} },
        additionalPrinterColumns: [{ name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' }],
        schema: {
          openAPIV3Schema: {
            type: 'object',
            description: crd.note,
            properties: {
              apiVersion: { type: 'string' },
              kind: { type: 'string' },
              metadata: { type: 'object' },
              spec: specSchema(crd),
              status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
            },
            required: ['spec'],
          },
        },
      }],
    },
  }
}

/** File name → YAML text of every CRD. */
export function generateCrds(): Map<string, string> {
  const out = new Map<string, string>()
  for (const crd of CRDS) {
    const header = `# GENERATED by scripts/gen-crds.ts from schemas/ (${crd.schemas.join(', ')}) — do not edit.\n# ${crd.note}\n`
    out.set(`${crd.plural}.${crd.group}.yaml`, header + stringify(crdDocument(crd), { lineWidth: 0 }))
  }
  return out
}

function main(): void {
  const check = process.argv.includes('--check')
  const wanted = generateCrds()
  let stale = 0
  fs.mkdirSync(CRD_DIR, { recursive: true })
  for (const [name, text] of wanted) {
    const file = path.join(CRD_DIR, name)
    const have = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null
    if (have === text) continue
    stale++
    if (check) process.stderr.write(`deploy/crds/${name} is out of date (npm run gen-crds)\n`)
    else { fs.writeFileSync(file, text); process.stdout.write(`wrote deploy/crds/${name}\n`) }
  }
  if (check && stale > 0) process.exitCode = 1
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main()
