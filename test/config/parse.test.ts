import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { formatProblem } from '../../lib/resources/problem.ts'

t.test('multi-document YAML keeps document positions, skipping empty ones', async (t) => {
  const r = parseManifests('a.yaml', 'kind: A\n---\n---\n# only a comment\n---\nkind: B\n')
  t.same(r.problems, [])
  t.same(r.docs.map((d) => [d.source.doc, (d.doc as { kind: string }).kind]), [[0, 'A'], [3, 'B']])
  t.equal(r.docs[0]?.source.file, 'a.yaml')
})

t.test('a YAML syntax error names the file, the document, the line and the object; the other documents are kept', async (t) => {
  const text = 'kind: A\n---\nkind: B\nmetadata:\n  name: x\n  namespace: team\n  labels: a: b\n---\nkind: C\n'
  const r = parseManifests('dir/b.yaml', text)
  t.same(r.docs.map((d) => [d.source.doc, (d.doc as { kind: string }).kind]), [[0, 'A'], [2, 'C']])
  t.equal(r.problems.length, 1)
  const p = r.problems[0]
  t.equal(p?.source.file, 'dir/b.yaml')
  t.equal(p?.source.doc, 1)
  t.equal(p?.severity, 'error')
  t.match(p?.message, /^line 7\b/)
  t.same([p?.kind, p?.namespace, p?.name], ['B', 'team', 'x'], 'what could be read of the broken document names it')
})

t.test('duplicate keys are an error with the line of the second key, in that document only', async (t) => {
  const r = parseManifests('c.yml', 'kind: A\nmetadata: {}\nkind: B\n')
  t.match(r.problems[0]?.message, /^line 3, column 1: Map keys must be unique/)
  t.same(r.docs, [])
  // The probe's case: a valid route, then one with `namespace:` twice.
  const routes = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: good\n---\n' +
    'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: other\n  namespace: default\n  namespace: default\n'
  const both = parseManifests('routes.yaml', routes)
  t.same(both.docs.map((d) => d.source.doc), [0], 'the valid route is kept')
  t.same(both.problems.map((p) => [p.source.doc, p.kind, p.namespace, p.name]), [[1, 'HTTPRoute', 'default', 'other']])
  t.match(both.problems[0]?.message, /^line 11, column 3: Map keys must be unique/)
  t.equal(formatProblem(both.problems[0]!), 'routes.yaml:1: HTTPRoute default/other: line 11, column 3: Map keys must be unique')
})

t.test('a broken document after a List keeps the numbering of documents', async (t) => {
  const r = parseManifests('l.yaml', 'kind: List\nitems:\n- kind: A\n- kind: B\n---\nkind: C\n  x: [\n---\nkind: D\n')
  t.same(r.docs.map((d) => [d.source.doc, (d.doc as { kind: string }).kind]), [[0, 'A'], [1, 'B'], [3, 'D']])
  t.same(r.problems.map((p) => p.source.doc), [2])
})

t.test('a document nothing can be read of is named by its position only', async (t) => {
  const r = parseManifests('x.yaml', 'kind: A\n---\n]\n')
  t.same(r.docs.map((d) => d.source.doc), [0])
  t.same(r.problems.map((p) => [p.source.doc, p.kind, p.name]), [[1, '', '']])
  t.match(r.problems[0]?.message, /^line 3, column 1: /)
  t.match(formatProblem(r.problems[0]!), /^x\.yaml:1: line 3, column 1: /, 'no "<no kind> <no name>" placeholder')
})

t.test('kind: List is unwrapped, in YAML and in JSON', async (t) => {
  const yaml = parseManifests('l.yaml', 'kind: List\nitems:\n- kind: A\n- kind: B\n---\nkind: C\n')
  t.same(yaml.docs.map((d) => [d.source.doc, (d.doc as { kind: string }).kind]), [[0, 'A'], [1, 'B'], [2, 'C']])
  const json = parseManifests('l.json', JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [{ kind: 'A' }, { kind: 'B' }] }))
  t.same(json.docs.map((d) => [d.source.doc, (d.doc as { kind: string }).kind]), [[0, 'A'], [1, 'B']])
})

t.test('JSON: one object; errors give a line and never quote the input', async (t) => {
  const ok = parseManifests('o.JSON', '{"kind":"A"}')
  t.same(ok.docs, [{ source: { file: 'o.JSON', doc: 0 }, doc: { kind: 'A' } }])
  const bad = parseManifests('s.json', '{\n "kind": "Secret",\n "data": {"k": "c2VjcmV0"} ]\n}')
  t.equal(bad.docs.length, 0)
  t.match(bad.problems[0]?.message, /^line 3\b.*invalid JSON/)
  t.notMatch(bad.problems[0]?.message, /c2VjcmV0/)
})

t.test('empty files are empty, not errors', async (t) => {
  t.same(parseManifests('e.yaml', ''), { docs: [], problems: [] })
  t.same(parseManifests('e.json', '  \n'), { docs: [], problems: [] })
})

t.test('alias bombs are refused', async (t) => {
  const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]']
  for (let i = 0; i < 8; i++) lines.push(`${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}]`)
  const r = parseManifests('bomb.yaml', lines.join('\n') + '\n')
  t.equal(r.docs.length, 0)
  t.match(r.problems[0]?.message, /^line \d+/)
})

t.test('YAML as kubectl reads it: merge keys, and anchors used many times', async (t) => {
  const route = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  rules:
    - backendRefs:
        - &ref {group: gateway.envoyproxy.io, kind: Backend, name: up, port: 40100}
    - backendRefs:
        - <<: *ref
          weight: 5
        - *ref
`
  const r = parseManifests('r.yaml', route)
  t.same(r.problems, [])
  const rules = (r.docs[0]?.doc as { spec: { rules: Array<{ backendRefs: unknown[] }> } }).spec.rules
  t.same(rules[1]?.backendRefs, [
    { group: 'gateway.envoyproxy.io', kind: 'Backend', name: 'up', port: 40100, weight: 5 },
    { group: 'gateway.envoyproxy.io', kind: 'Backend', name: 'up', port: 40100 },
  ])
  // One anchor used 500 times (the yaml library's default refuses more than 100).
  const lines = ['apiVersion: v1', 'kind: ConfigMap', 'metadata: {name: common}', 'data:', '  x: &v "value"']
  for (let i = 0; i < 500; i++) lines.push(`  k${i}: *v`)
  const cm = parseManifests('cm.yaml', lines.join('\n') + '\n')
  t.same(cm.problems, [])
  t.equal((cm.docs[0]?.doc as { data: Record<string, string> }).data.k499, 'value')
})

t.test('aliases that expand a document past the bound are that document\'s error', async (t) => {
  // Nine levels of nine: a "billion laughs" (9^9 values from 90 written).
  const laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
  for (let i = 1; i < 9; i++) {
    const prev = String.fromCharCode(96 + i)
    laughs.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill(`*${prev}`).join(',')}]`)
  }
  const bomb = parseManifests('bomb.yaml', `kind: A\n---\n${laughs.join('\n')}\n---\nkind: B\n`)
  t.same(bomb.docs.map((d) => d.source.doc), [0, 2], 'the documents beside it are kept')
  t.equal(bomb.problems[0]?.source.doc, 1)
  t.match(bomb.problems[0]?.message, /^line \d+, column \d+: aliases expand the document by more than/)
  // Merge keys that merge merges: each level doubles the work.
  const merges = ['m0: &m0 {k: v}']
  for (let i = 1; i < 40; i++) merges.push(`m${i}: &m${i} {<<: [*m${i - 1}, *m${i - 1}], k${i}: v}`)
  t.match(parseManifests('merge.yaml', merges.join('\n') + '\n').problems[0]?.message, /aliases expand the document by more than/)
  // A long value, used often.
  const long = parseManifests('long.yaml', `a: &a "${'x'.repeat(100_000)}"\nb: [${Array(100).fill('*a').join(', ')}]\n`)
  t.match(long.problems[0]?.message, /aliases expand the document by more than/)
  t.equal(parseManifests('ok.yaml', `a: &a "${'x'.repeat(100_000)}"\nb: [${Array(20).fill('*a').join(', ')}]\n`).problems.length, 0, 'under the bound')
})

t.test('an alias inside the node it names is an error, not a cycle', async (t) => {
  const r = parseManifests('c.yaml', 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: &a\n  k: v\n  self: *a\n')
  t.same(r.docs, [])
  t.match(r.problems[0]?.message, /^line 6, column 9: an alias inside the node it names/)
  t.equal(r.problems[0]?.name, 'c')
})

// V8 quotes the input around a bad token ("...\"token\": 'k9X2'\"... is not
// valid JSON") and gives no position for that form; the problem must quote
// nothing from the file, whatever V8's wording, and still name the line.
t.test('JSON: a syntax error inside a Secret value quotes nothing and names its line and column', async (t) => {
  const text = '{\n  "apiVersion": "v1",\n  "kind": "Secret",\n  "metadata": { "name": "provider-key", "namespace": "default" },\n  "stringData": { "token": \'k9X2qT7w\' },\n  "type": "Opaque"\n}\n'
  const r = parseManifests('10-secret.json', text)
  t.same(r.docs, [])
  const message = r.problems[0]?.message ?? ''
  t.match(message, /^line 5, column 28: invalid JSON/)
  t.notMatch(message, /k9X2|'/, 'no source text, not even the bad character')
  const cases: Array<[string, RegExp]> = [
    ['{"a": 1,}', /^line 1, column 9: invalid JSON/],
    ['{"a": 1', /^line 1, column 8: invalid JSON: unexpected end/],
    ['[1,\n2', /^line 2, column 2: invalid JSON: unexpected end/],
    ['{"a": tru}', /^line 1, column 7: invalid JSON/],
    ['{"k": "v"}\n  xyz-secret', /^line 2, column 3: invalid JSON/],
    ['{"k": "sec\u0001ret"}', /^line 1, column 11: invalid JSON/],
    ['{"k": "se\\qcret"}', /^line 1, column 10: invalid JSON/],
    ['{"k": 01}', /^line 1, column 8: invalid JSON/],
    ['{"k": "secret-no-end', /^line 1, column 21: invalid JSON: unexpected end/],
    ['{\'secret-key\': 1}', /^line 1, column 2: invalid JSON/],
  ]
  for (const [input, expected] of cases) {
    const m = parseManifests('x.json', input).problems[0]?.message ?? ''
    t.match(m, expected, JSON.stringify(input))
    t.notMatch(m, /secret|xyz|tru\b|sec|\\q/, `${JSON.stringify(input)} quotes nothing`)
  }
})

t.test('JSON: a UTF-8 byte order mark is accepted, as in YAML', async (t) => {
  const json = parseManifests('bom.json', '\uFEFF{"kind":"A"}\n')
  t.same(json.problems, [])
  t.same(json.docs, [{ source: { file: 'bom.json', doc: 0 }, doc: { kind: 'A' } }])
  const yaml = parseManifests('bom.yaml', '\uFEFFkind: A\n')
  t.same(yaml.docs.map((d) => d.doc), [{ kind: 'A' }])
})

t.test('YAML: a syntax error inside a Secret value quotes none of it', async (t) => {
  // The yaml library's messages quote the input for a few errors: a block scalar
  // header with text after it (a newline forgotten after `|-`), an invalid escape,
  // an unresolved alias. In a Secret that text is the secret.
  const cases: Record<string, string> = {
    'block scalar header': 'token: |-sk-live-ABCDEF123456',
    'folded header': 'token: >sk-live-ABCDEF123456',
    'escape': 'token: "\\Usk-live-ABCDEF123456"',
    'hex escape': 'token: "\\xZsk-live-ABCDEF123456"',
    'alias': 'token: *sk-live-ABCDEF123456',
  }
  for (const [name, line] of Object.entries(cases)) {
    const text = `apiVersion: v1\nkind: Secret\nmetadata:\n  name: k\n  namespace: default\nstringData:\n  ${line}\n`
    const { problems } = parseManifests('s.yaml', text)
    t.equal(problems.length, 1, `${name}: one problem`)
    // An alias fails when the document is built: the line is the document's.
    t.match(problems[0]?.message ?? '', name === 'alias' ? /^line 1\b/ : /^line 7, column \d+: /, `${name}: its line`)
    t.notMatch(problems[0]?.message ?? '', /sk-live|ABCDEF/, `${name}: none of the value: ${problems[0]?.message}`)
    t.match(formatProblem(problems[0]!), /^s\.yaml:0: Secret default\/k: /, `${name}: the Secret is named`)
  }
  // What a broken document makes of its name is taken only if it looks like a name.
  for (const name of ['sk-live-ABCDEF123456', 'sk-live abcdef']) {
    const { problems } = parseManifests('s.yaml', `apiVersion: v1\nkind: Secret\nmetadata:\n  name: ${name}\nstringData:\n  t: |-x\n`)
    t.equal(problems[0]?.name, '', `${name}: not taken for the name`)
  }
})

t.test('nesting is bounded: a document nested past the bound is that document\'s error, in JSON and YAML alike', async (t) => {
  const deep = (n: number): string => '['.repeat(n) + ']'.repeat(n)
  // JSON.parse reads any depth, but what is built from the object (the
  // snapshot cache key, /config_dump) overflowed the stack past a few
  // thousand levels, killing `serve` (the probe's 200,000-deep JSON route).
  const json = parseManifests('deep.json', `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep","namespace":"apps"},\n"data":{"a":${deep(200_000)}}}`)
  t.equal(json.docs.length, 0, 'not returned (tap could not even print it)')
  t.equal(json.problems.length, 1)
  t.match(json.problems[0]?.message, /^line 2, column \d+: nested more than 512 levels deep$/)
  t.same([json.problems[0]?.kind, json.problems[0]?.namespace, json.problems[0]?.name], ['', '', ''], 'JSON that is not read names nothing')
  t.same(parseManifests('ok.json', `{"kind":"A","a":${deep(511)}}`).problems, [], 'the bound itself is fine')
  // YAML: the library's own recursion gave up with V8's words.
  for (const n of [600, 100_000]) {
    const yaml = parseManifests('deep.yaml', `kind: A\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: apps}\ndata:\n  a: ${deep(n)}\n`)
    t.same(yaml.docs.map((d) => d.source.doc), [0], 'the other document is kept')
    t.equal(yaml.problems.length, 1)
    t.match(yaml.problems[0]?.message, /^line 7, column \d+: nested more than 512 levels deep$/, `${n} levels`)
    t.same([yaml.problems[0]?.kind, yaml.problems[0]?.namespace, yaml.problems[0]?.name], ['ConfigMap', 'apps', 'deep'])
  }
  // An alias can nest a deep anchor deeper still.
  const half = 'x: ' + '{a: '.repeat(300) + '1' + '}'.repeat(300)
  const aliased = parseManifests('alias.yaml', `kind: A\nbase: &b ${half.slice(3)}\nmore: ${'['.repeat(300)}*b${']'.repeat(300)}\n`)
  t.equal(aliased.docs.length, 0)
  // (named at the node past the bound, which is inside the anchor the alias repeats)
  t.match(aliased.problems[0]?.message, /^line 2, column \d+: nested more than 512 levels deep$/)
})

t.test('JSON: a key twice in one object is an error at the second, as in YAML; the same key in two objects is not', async (t) => {
  const dup = parseManifests('d.json', '{"apiVersion":"v1","kind":"ConfigMap",\n"metadata":{"name":"a","namespace":"apps"},\n"data":{"k":"1","k":"2"}}')
  t.same(dup.docs, [])
  t.equal(dup.problems[0]?.message, 'line 3, column 17: Map keys must be unique')
  t.equal(dup.problems[0]?.severity, 'error')
  const escaped = parseManifests('e.json', '{"kind":"A","k\\u0069nd":"B"}')
  t.match(escaped.problems[0]?.message, /Map keys must be unique/, 'names compared as decoded')
  const fine = parseManifests('f.json', '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"apps"},"data":{"name":"x","kind":"y"},"x":[{"a":1},{"a":2}]}')
  t.same(fine.problems, [])
  t.equal(fine.docs.length, 1)
})

t.test('a map with 50,000 keys parses; a key given twice among them is still found', async (t) => {
  // The library's own check compares each key with every earlier one (~40 s here, the event
  // loop stopped); checkUniqueKeys uses a set. No clock is asserted: a regression shows as a slow test.
  const keys = Array.from({ length: 50_000 }, (_, i) => `  k${i}: v\n`).join('')
  const head = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big, namespace: default}\ndata:\n'
  const r = parseManifests('big.yaml', head + keys)
  t.same(r.problems, [])
  const dup = parseManifests('big.yaml', head + keys + '  k49999: again\n')
  t.equal(dup.problems[0]?.message, 'line 50005, column 3: Map keys must be unique')
})
