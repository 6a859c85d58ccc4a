// Parsed documents → Snapshot. Each document is checked on its own: an invalid
// object is dropped with its problems recorded, and never takes the valid rest
// of the configuration down with it (DESIGN.md "validate").

import { logger } from '../observe/log.ts'
import { readObject } from '../resources/read.ts'
import { validateDocument, isKnownKind, unreadKindProblem } from '../validate/validate.ts'
import { snapshotKeyOf } from '../resources/model.ts'
import type { ModelObject } from '../resources/model.ts'
import type { SourceRef } from '../resources/meta.ts'
import { dropsObject, type ConfigProblem } from '../resources/problem.ts'
import { MAP_OF_KIND, type Snapshot, type SnapshotMapName } from '../resources/snapshot.ts'

const log = logger('config')


type MutableSnapshot = { -readonly [K in SnapshotMapName]: Map<string, ModelObject> }

export interface SourcedDoc {
  readonly source: SourceRef
  readonly doc: unknown
}

/**
 * Issue 11: what the last build made of each document, so a reload validates
 * and reads only the documents that changed (ajv + semantic rules + readObject
 * are most of a snapshot's cost). Keyed by source position and content; holds
 * only the documents of the last build. An unchanged document also keeps its
 * model object instance, so compile sees the same object as before.
 */
export class DocumentCache {
  previous = new Map<string, Checked>()
  /** Builds made so far: the firstSeen of an object new in the next one. */
  builds = 0
  /** The objects of the last build, by map and key: when each was first seen, and the file it came from. */
  present = new Map<string, { readonly firstSeen: number; readonly file: string }>()
}

interface Checked {
  readonly problems: readonly ConfigProblem[]
  readonly object: ModelObject | null
}

/**
 * Validate, normalize and index documents. `extraProblems` (e.g. files that
 * could not be parsed) are carried into `snapshot.problems` ahead of the
 * per-object ones. `cache`: reuse the results of unchanged documents (file mode reloads).
 */
export function buildSnapshot(docs: readonly SourcedDoc[], extraProblems: readonly ConfigProblem[] = [], cache?: DocumentCache): Snapshot {
  const maps = {} as MutableSnapshot
  for (const name of Object.values(MAP_OF_KIND)) maps[name] = new Map()
  const problems: ConfigProblem[] = [...extraProblems]
  const next = new Map<string, Checked>()

  for (const { source, doc } of docs) {
    const header = headerOf(doc)
    if (header === null) {
      problems.push(headerProblem(source, doc))
      continue
    }
    // Kinds the gateway does not use (Deployments next to the Gateway, say) are
    // not errors; a kind or apiVersion typo in a group it reads is a warning.
    if (!isKnownKind(header.apiVersion, header.kind)) {
      const unread = unreadKindProblem(source, header)
      if (unread !== null) problems.push(unread)
      else log.debug({ file: source.file, doc: source.doc, apiVersion: header.apiVersion, kind: header.kind }, 'skipping unknown kind')
      continue
    }
    let checked: Checked | undefined
    if (cache !== undefined) {
      const key = `${source.file}\u0000${source.doc}\u0000${JSON.stringify(doc)}`
      checked = cache.previous.get(key)
      if (checked === undefined) {
        checked = check(doc, source, header)
        // Files have no creationTimestamp: an object's age is when this process first saw it (meta.ts firstSeen).
        const object = checked.object
        if (object !== null && cache.builds > 0) {
          const firstSeen = cache.present.get(`${MAP_OF_KIND[object.kind]}\u0000${snapshotKeyOf(object)}`)?.firstSeen ?? cache.builds
          if (firstSeen !== 0) checked = { problems: checked.problems, object: { ...object, meta: { ...object.meta, firstSeen } } as ModelObject }
        }
      }
      next.set(key, checked)
    } else {
      checked = check(doc, source, header)
    }
    problems.push(...checked.problems)
    const object = checked.object
    if (object === null) continue
    const map = maps[MAP_OF_KIND[object.kind]]
    const key = snapshotKeyOf(object)
    const first = map.get(key)
    if (first !== undefined) {
      // The one that served keeps its place (file mode): a newcomer is the duplicate, whichever file sorts first.
      const served = cache?.present.get(`${MAP_OF_KIND[object.kind]}\u0000${key}`)?.file
      const [kept, dropped] = served === source.file && first.source.file !== served ? [object, first] : [first, object]
      problems.push(problem(dropped.source, dropped.kind, dropped.meta.namespace, dropped.meta.name,
        `duplicate ${dropped.kind} ${key}: already defined at ${kept.source.file}:${kept.source.doc}; this one is ignored`))
      map.set(key, kept)
      continue
    }
    map.set(key, object)
  }
  if (cache !== undefined) {
    cache.previous = next
    cache.builds++
    cache.present = new Map()
    for (const [name, map] of Object.entries(maps)) {
      for (const [key, object] of map) cache.present.set(`${name}\u0000${key}`, { firstSeen: object.meta.firstSeen, file: object.source.file })
    }
  }
  return { ...(maps as unknown as Omit<Snapshot, 'problems'>), problems }
}

/** One document through validation and the reader: its problems, and its object unless an error drops it. */
function check(doc: unknown, source: SourceRef, header: Header): Checked {
  try {
    const checked = validateDocument(doc, source)
    if (checked.problems.some(dropsObject)) return { problems: checked.problems, object: null }
    const object = readObject(doc as Record<string, unknown>, source)
    if (!checked.problems.some((p) => p.rule !== undefined)) return { problems: checked.problems, object }
    return withDroppedRules(object, checked.problems)
  } catch (err) {
    // A reader bug on one odd manifest must not stop the others from loading.
    log.error({ file: source.file, doc: source.doc, kind: header.kind, err }, 'reading object failed')
    return { problems: [problem(source, header.kind, header.namespace, header.name, `could not read object: ${err instanceof Error ? err.message : String(err)}`)], object: null }
  }
}

/**
 * Gateway API RouteConditionPartiallyInvalid, the "drop the invalid rules"
 * reading: a route some of whose rules have errors of their own (validate's
 * `rule` problems) is kept and marked to be served without them; one whose
 * every rule has such an error is dropped like any invalid object (Accepted=False).
 */
function withDroppedRules(object: ModelObject | null, problems: readonly ConfigProblem[]): Checked {
  if (object === null || (object.kind !== 'HTTPRoute' && object.kind !== 'GRPCRoute')) {
    // Only route rules can be dropped: anything else with such an error goes whole.
    return { problems: problems.map(asObjectError), object: null }
  }
  const reasons = new Map<number, string[]>()
  for (const p of problems) {
    if (p.rule === undefined) continue
    const list = reasons.get(p.rule) ?? []
    list.push(`${p.field}: ${p.message}`)
    reasons.set(p.rule, list)
  }
  if (reasons.size >= object.rules.length) return { problems: problems.map(asObjectError), object: null }
  const droppedRules = [...reasons].sort((a, b) => a[0] - b[0]).map(([index, list]) => ({ index, name: object.rules[index]?.name ?? null, reasons: list }))
  return {
    problems: problems.map((p) => p.rule === undefined ? p : { ...p, message: `${p.message}; rule ${p.rule} is dropped, the route's other rules are served` }),
    object: { ...object, droppedRules },
  }
}

/** A rule's error as its object's: the object is dropped whole. */
function asObjectError(p: ConfigProblem): ConfigProblem {
  if (p.rule === undefined) return p
  const { rule: _rule, ...rest } = p
  return rest
}

interface Header {
  readonly apiVersion: string
  readonly kind: string
  readonly namespace: string
  readonly name: string
}

function headerOf(doc: unknown): Header | null {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return null
  const d = doc as Record<string, unknown>
  if (typeof d.apiVersion !== 'string' || typeof d.kind !== 'string') return null
  const meta = typeof d.metadata === 'object' && d.metadata !== null ? d.metadata as Record<string, unknown> : {}
  return {
    apiVersion: d.apiVersion,
    kind: d.kind,
    namespace: typeof meta.namespace === 'string' ? meta.namespace : '',
    name: typeof meta.name === 'string' ? meta.name : '',
  }
}

/**
 * Why a document has no header: not an object at all (a list, a string: say
 * which), or which of apiVersion and kind is missing or not a string, naming
 * the object as far as it can be read.
 */
function headerProblem(source: SourceRef, doc: unknown): ConfigProblem {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    const what = doc === null ? 'null' : Array.isArray(doc) ? 'a list' : `a ${typeof doc}`
    return problem(source, '', '', '', `document is ${what}, not an object with apiVersion and kind`)
  }
  const d = doc as Record<string, unknown>
  const meta = typeof d.metadata === 'object' && d.metadata !== null ? d.metadata as Record<string, unknown> : {}
  const kind = typeof d.kind === 'string' ? d.kind : ''
  const namespace = typeof meta.namespace === 'string' ? meta.namespace : ''
  const name = typeof meta.name === 'string' ? meta.name : ''
  const field = typeof d.apiVersion !== 'string' ? 'apiVersion' : 'kind'
  const value = d[field]
  const message = value === undefined ? 'required' : `must be a string, not ${value === null ? 'null' : Array.isArray(value) ? 'a list' : `a ${typeof value}`}`
  return { ...problem(source, kind, namespace, name, message), field }
}

function problem(source: SourceRef, kind: string, namespace: string, name: string, message: string): ConfigProblem {
  return { source, kind, namespace, name, field: '', message, severity: 'error' }
}
