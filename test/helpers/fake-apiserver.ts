// An in-process Kubernetes API server for tests (node:http on 127.0.0.1). It
// implements the parts of the API machinery sallyport relies on, the way the
// real one behaves:
// - one global resourceVersion counter; every write bumps it and stamps the object;
// - list with `limit`/`continue` (chunked lists served from a consistent snapshot),
//   `resourceVersion` as the API server reads it: unset (a quorum read) and "0" ("any":
//   the watch cache) both serve the current state here (the fake's cache is never
//   behind); any other value, without `limit`, is "not older than" (the current state),
//   with `limit` and no `resourceVersionMatch` (or with `Exact`) "exactly that one", 410
//   Expired once compacted; a value ahead of the server's gets 504 "Too large resource
//   version" (what the watch cache answers once it gave up waiting to catch up);
//   `labelSelector` (equality and existence forms), `fieldSelector` (metadata.name,
//   metadata.namespace, and a Secret's type; 400 for any other field, as the real
//   server answers), 410 Gone for an expired token;
// - watch from a resourceVersion: ADDED/MODIFIED/DELETED replayed from the event
//   history, then streamed as newline-delimited JSON; BOOKMARKs when asked for
//   (`allowWatchBookmarks`); a resourceVersion older than the retained history
//   gets an ERROR event with code 410 (what kube-apiserver does: "too old
//   resource version"), and `expireWatches()` sends the same to open watches;
// - status subresource GET/PUT/PATCH (merge patch) with optimistic concurrency
//   (409 Conflict on a stale metadata.resourceVersion), refused with 422 where the
//   CRDs' schemas refuse it: a condition message over 32768 characters, more than
//   16 policy ancestors, 32 route parents or 16 Gateway addresses;
// - generic create/get/update/delete/patch (Leases, Events);
// - failure injection: `watchErrors` (a watch ended by an ERROR event with a Status), `dropWatches()`, `endWatches()` (a watch timing out), `silenceWatches()` (a
//   half-open watch connection: open, and nothing arrives any more), `forbid(plural)`, `hide(plural)` (404 as
//   for a CRD that is not installed), `serveVersion(group, plural, version)` (a CRD upgraded to serve
//   another version instead), `stop()`/`start()` for an unreachable server, `hang(match)` for requests
//   that are accepted and never answered (a wedged API server or network path), `refuse(match, code)` for
//   requests answered with an error status as the real server words it (403 from RBAC, 422 from validation, 5xx);
// - authentication: `acceptTokens(tokens)` answers 401 for any other bearer token;
// - RBAC: `authorize(rules)` answers 403 for every request no rule grants (verbs
//   as kube-apiserver derives them: get, list, watch, create, update, patch, delete),
//   so a test can run against the ClusterRole of deploy/kubernetes/rbac.yaml.
// Driven by the real @kubernetes/client-node client (KubeConfig at http://127.0.0.1:PORT).

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Socket } from 'node:net'

/** metav1.MicroTime as the API server decodes it: RFC 3339, six fractional digits. */
const MICRO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$/

export interface ResourceDef {
  readonly group: string
  readonly version: string
  readonly plural: string
  readonly kind: string
  readonly namespaced: boolean
}

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> }

interface WatchEvent { readonly type: 'ADDED' | 'MODIFIED' | 'DELETED'; readonly rv: number; readonly object: Obj }

interface Watcher {
  readonly res: http.ServerResponse
  readonly def: ResourceDef
  readonly namespace: string | null
  readonly selector: Selector | null
  readonly fields: Selector | null
  readonly bookmarks: boolean
  /** silenceWatches(): nothing more is written to it, not even its end. */
  silent: boolean
}

interface Store {
  /** Replaced by serveVersion() (a CRD upgrade that serves another version). */
  def: ResourceDef
  readonly objects: Map<string, Obj>
  readonly history: WatchEvent[]
}

export interface RequestRecord { readonly method: string; readonly path: string; readonly query: string; readonly authorization: string }

/** A ClusterRole/Role rule (rbac.authorization.k8s.io/v1 PolicyRule), as written in a manifest. */
export interface PolicyRule {
  readonly apiGroups?: readonly string[]
  readonly resources?: readonly string[]
  readonly verbs: readonly string[]
  readonly resourceNames?: readonly string[]
}

/** What `hang` matches on: the request's method, path and Authorization header (each test client can have its own token). */
export interface HangMatch { readonly method: string; readonly path: string; readonly authorization: string; readonly query: URLSearchParams }

const clone = <T>(v: T): T => structuredClone(v)

/** RFC 1123 subdomain, as Kubernetes names most objects: at most 253 characters, dot-separated lowercase alphanumeric labels with inner dashes. */
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

export class FakeApiServer {
  #server: http.Server | null = null
  #port = 0
  #rv = 1
  /** Events at or below this resourceVersion are gone from the history. */
  #compactedRv = 0
  readonly #stores = new Map<string, Store>() // by `${group}/${plural}`
  readonly #watchers = new Set<Watcher>()
  readonly #silenced = new Set<Watcher>()
  readonly #sockets = new Set<Socket>()
  readonly #forbidden = new Set<string>()
  readonly #hidden = new Set<string>()
  #rules: readonly PolicyRule[] | null = null
  #tokens: ReadonlySet<string> | null = null
  readonly #listings = new Map<string, { readonly items: Obj[]; readonly rv: number }>()
  #nextListing = 1
  #bookmarkTimer: NodeJS.Timeout | null = null
  #hang: ((r: HangMatch) => boolean) | null = null
  #throttle: { readonly match: (r: HangMatch) => boolean; readonly retryAfter: string | null; readonly code: 429 | 503; left: number } | null = null
  #refuse: { readonly match: (r: HangMatch) => boolean; readonly code: number } | null = null
  readonly #held = new Set<http.ServerResponse>()
  /** How a watch from a compacted resourceVersion is refused: an ERROR event (kube-apiserver's usual answer) or an HTTP 410. */
  goneAs: 'event' | 'http' = 'event'
  /**
   * Watches of these resources (plural) are answered with 200, one ERROR event
   * carrying this Status, and their end: how kube-apiserver reports a failure
   * found once the watch has started (an internal error, a resourceVersion
   * ahead of its cache: 504 "Too large resource version").
   */
  readonly watchErrors = new Map<string, { readonly code: number; readonly reason: string; readonly message: string; readonly details?: { readonly retryAfterSeconds?: number } }>()
  /** Answer every watch with 200 and end it at once (after replaying history): a broken proxy. */
  endWatchesAtOnce = false
  /** Every request served (tests count status writes, lease updates, relists). */
  readonly requests: RequestRecord[] = []

  constructor(defs: readonly ResourceDef[]) {
    for (const def of defs) this.#stores.set(`${def.group}/${def.plural}`, { def, objects: new Map(), history: [] })
  }

  get port(): number { return this.#port }
  get url(): string { return `http://127.0.0.1:${this.#port}` }
  get resourceVersion(): string { return String(this.#rv) }

  /** Listen (again, on the same port after `stop()`). */
  async start(bookmarkIntervalMs = 0): Promise<void> {
    const server = http.createServer((req, res) => this.#handle(req, res))
    server.on('connection', (s: Socket) => { this.#sockets.add(s); s.on('close', () => this.#sockets.delete(s)) })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.#port, '127.0.0.1', resolve)
    })
    this.#port = (server.address() as AddressInfo).port
    this.#server = server
    if (bookmarkIntervalMs > 0) {
      this.#bookmarkTimer = setInterval(() => this.bookmark(), bookmarkIntervalMs)
      this.#bookmarkTimer.unref()
    }
  }

  /** Close the listener and every connection: the server is unreachable until `start()`. */
  async stop(): Promise<void> {
    if (this.#bookmarkTimer !== null) clearInterval(this.#bookmarkTimer)
    this.#bookmarkTimer = null
    this.answer()
    const server = this.#server
    this.#server = null
    this.#watchers.clear()
    for (const s of this.#sockets) s.destroy()
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  /** A kubeconfig (YAML text) pointing at this server over plain http. */
  kubeconfig(): string {
    return [
      'apiVersion: v1', 'kind: Config', 'current-context: fake',
      'clusters:', `- name: fake`, '  cluster:', `    server: ${this.url}`, '    insecure-skip-tls-verify: true',
      'contexts:', '- name: fake', '  context:', '    cluster: fake', '    user: fake',
      'users:', '- name: fake', '  user:', '    token: fake-token', '',
    ].join('\n')
  }

  // ───────────── test controls ─────────────

  /** Create or replace an object (spec changes bump metadata.generation). Returns the stored copy. */
  apply(object: Record<string, unknown>): Obj {
    const store = this.#storeOfObject(object)
    const obj = clone(object) as Obj
    const meta = obj.metadata
    const key = this.#key(store.def, meta.namespace as string | undefined, meta.name as string)
    const old = store.objects.get(key)
    if (old === undefined) return this.#create(store, obj)
    if (JSON.stringify(old.spec) !== JSON.stringify(obj.spec) || JSON.stringify((old as Record<string, unknown>).data) !== JSON.stringify((obj as Record<string, unknown>).data)) {
      meta.generation = (old.metadata.generation as number) + 1
    } else {
      meta.generation = old.metadata.generation
    }
    if (obj.status === undefined && old.status !== undefined) obj.status = old.status
    return this.#update(store, key, obj, old)
  }

  remove(apiVersion: string, kind: string, namespace: string, name: string): boolean {
    const store = this.#storeOf(apiVersion, kind)
    const key = this.#key(store.def, namespace, name)
    const old = store.objects.get(key)
    if (old === undefined) return false
    this.#delete(store, key, old)
    return true
  }

  get(apiVersion: string, kind: string, namespace: string, name: string): Obj | null {
    const store = this.#storeOf(apiVersion, kind)
    const o = store.objects.get(this.#key(store.def, namespace, name))
    return o === undefined ? null : clone(o)
  }

  list(apiVersion: string, kind: string): Obj[] {
    return [...this.#storeOf(apiVersion, kind).objects.values()].map(clone)
  }

  /** Drop every open watch connection without a word (a load balancer timing out, a restart). */
  dropWatches(): void {
    for (const w of this.#watchers) w.res.socket?.destroy()
    this.#watchers.clear()
  }

  /**
   * End every open watch cleanly, as the API server does when a watch's
   * timeoutSeconds is up: the client reads every event written before the end.
   */
  endWatches(): void {
    for (const w of this.#watchers) w.res.end()
    this.#watchers.clear()
  }

  /**
   * Open watches (of `plural`, or all) stop receiving anything — events,
   * bookmarks, their end at timeoutSeconds — while their connections stay
   * open: what a client sees of a half-open TCP connection (a NAT or load
   * balancer that forgot it, an API server VIP that moved). Watches opened
   * afterwards are served as usual.
   */
  silenceWatches(plural?: string): void {
    for (const w of [...this.#watchers]) {
      if (plural !== undefined && w.def.plural !== plural) continue
      w.silent = true
      this.#watchers.delete(w)
      this.#silenced.add(w)
    }
  }

  /** Silenced watches whose connection is still open (the client has not given up on them). */
  silencedWatches(): number {
    return this.#silenced.size
  }

  /** Forget the event history up to now: older resourceVersions get 410 Gone; open watches get an ERROR 410 event and are closed. */
  expireWatches(): void {
    this.#compactedRv = this.#rv
    for (const store of this.#stores.values()) store.history.length = 0
    for (const w of this.#watchers) {
      w.res.end(JSON.stringify({ type: 'ERROR', object: gone('too old resource version') }) + '\n')
    }
    this.#watchers.clear()
  }

  /** Continue tokens of chunked lists in flight expire (410 on the next page). */
  expireContinueTokens(): void {
    this.#listings.clear()
  }

  /** Send a BOOKMARK with the current resourceVersion to every watch that asked for them. */
  bookmark(): void {
    for (const w of this.#watchers) {
      if (!w.bookmarks) continue
      const object = { apiVersion: apiVersionOf(w.def), kind: w.def.kind, metadata: { resourceVersion: String(this.#rv) } }
      w.res.write(JSON.stringify({ type: 'BOOKMARK', object }) + '\n')
    }
  }

  /**
   * New requests `match` accepts are read and never answered (the connection
   * stays open) until `answer()`; watches already open keep streaming. They are
   * still recorded in `requests`.
   */
  hang(match: (r: HangMatch) => boolean): void { this.#hang = match }
  /**
   * The next `times` requests `match` accepts are refused as an overloaded API
   * server refuses them (API Priority and Fairness): 429 TooManyRequests, with
   * `Retry-After: retryAfter` unless null; with `code` 503, as a server that is
   * starting or shutting down answers (ServiceUnavailable, with its Retry-After).
   */
  throttle(match: (r: HangMatch) => boolean, retryAfter: string | null, times: number, code: 429 | 503 = 429): void {
    this.#throttle = { match, retryAfter, code, left: times }
  }
  /**
   * Requests `match` accepts are answered with `code` until `refuse(null)`, the
   * way kube-apiserver answers them: 403 as RBAC denies a verb on a resource
   * (a ClusterRole without `httproutes/status`), 409 as a write based on a stale
   * resourceVersion is refused, 422 as validation refuses a
   * body (a CRD's status schema), 500/503 as a failing server or admission webhook.
   */
  refuse(match: ((r: HangMatch) => boolean) | null, code = 403): void {
    this.#refuse = match === null ? null : { match, code }
  }

  /** Stop hanging requests; the ones held so far lose their connection. */
  answer(): void {
    this.#hang = null
    for (const res of this.#held) res.socket?.destroy()
    this.#held.clear()
  }

  /** 403 Forbidden for every request on this resource (plural) until `allow`. */
  forbid(plural: string): void { this.#forbidden.add(plural); for (const w of [...this.#watchers]) if (w.def.plural === plural) { w.res.socket?.destroy(); this.#watchers.delete(w) } }
  allow(plural: string): void { this.#forbidden.delete(plural) }
  /** From now on, only what these rules grant is served (403 Forbidden otherwise, as RBAC answers); null: everything. */
  authorize(rules: readonly PolicyRule[] | null): void { this.#rules = rules }
  /**
   * From now on only these bearer tokens authenticate (401 Unauthorized for any
   * other, or none, as kube-apiserver answers a token it does not accept: expired,
   * revoked, of a deleted service account); null: any request is authenticated.
   */
  acceptTokens(tokens: readonly string[] | null): void { this.#tokens = tokens === null ? null : new Set(tokens) }
  /**
   * The CRD of `plural` is upgraded to serve `version` instead of the one it
   * served (Gateway API releases drop old versions: GRPCRoute v1alpha2 in v1.2):
   * its objects are served under the new apiVersion, requests for the old one
   * are 404, and watches open on the old one end (the API server tears down the
   * old version's storage).
   */
  serveVersion(group: string, plural: string, version: string): void {
    const store = this.#stores.get(`${group}/${plural}`)
    if (store === undefined) throw new Error(`fake API server: no resource ${group}/${plural}`)
    const old = store.def
    store.def = { ...old, version }
    for (const o of store.objects.values()) o.apiVersion = apiVersionOf(store.def)
    for (const e of store.history) e.object.apiVersion = apiVersionOf(store.def)
    for (const w of [...this.#watchers]) if (w.def === old) { w.res.end(); this.#watchers.delete(w) }
  }
  /** 404 for every request on this resource, as when its CRD is not installed. */
  hide(plural: string): void { this.#hidden.add(plural) }
  unhide(plural: string): void { this.#hidden.delete(plural) }

  /** Requests matching a method and a path pattern. */
  count(method: string, path: RegExp): number {
    return this.requests.filter((r) => r.method === method && path.test(r.path)).length
  }

  // ───────────── storage ─────────────

  #key(def: ResourceDef, namespace: string | undefined, name: string): string {
    return def.namespaced ? `${namespace ?? 'default'}/${name}` : name
  }

  #storeOf(apiVersion: string, kind: string): Store {
    for (const s of this.#stores.values()) if (apiVersionOf(s.def) === apiVersion && s.def.kind === kind) return s
    throw new Error(`fake API server: no resource ${apiVersion} ${kind}`)
  }

  #storeOfObject(o: Record<string, unknown>): Store {
    return this.#storeOf(String(o.apiVersion), String(o.kind))
  }

  #stamp(store: Store, obj: Obj): void {
    obj.apiVersion = apiVersionOf(store.def)
    obj.kind = store.def.kind
    obj.metadata.resourceVersion = String(++this.#rv)
    // The API server writes metadata in one fixed field order, whichever order a client sent.
    obj.metadata = Object.fromEntries(Object.entries(obj.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Obj['metadata']
  }

  #create(store: Store, obj: Obj): Obj {
    const meta = obj.metadata
    if (store.def.namespaced && (meta.namespace === undefined || meta.namespace === '')) meta.namespace = 'default'
    if (!store.def.namespaced) delete meta.namespace
    meta.uid ??= `uid-${store.def.plural}-${String(meta.name)}-${this.#rv}`
    meta.generation ??= 1
    meta.creationTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, 'Z')
    this.#stamp(store, obj)
    store.objects.set(this.#key(store.def, meta.namespace as string | undefined, meta.name as string), obj)
    this.#emit(store, 'ADDED', obj)
    return clone(obj)
  }

  #update(store: Store, key: string, obj: Obj, old: Obj): Obj {
    obj.metadata.uid = old.metadata.uid
    obj.metadata.creationTimestamp = old.metadata.creationTimestamp
    if (store.def.namespaced) obj.metadata.namespace = old.metadata.namespace
    this.#stamp(store, obj)
    store.objects.set(key, obj)
    this.#emit(store, 'MODIFIED', obj)
    return clone(obj)
  }

  #delete(store: Store, key: string, old: Obj): void {
    store.objects.delete(key)
    const gone = clone(old)
    gone.metadata.resourceVersion = String(++this.#rv)
    this.#emit(store, 'DELETED', gone)
  }

  #emit(store: Store, type: WatchEvent['type'], obj: Obj): void {
    const event: WatchEvent = { type, rv: Number(obj.metadata.resourceVersion), object: clone(obj) }
    store.history.push(event)
    for (const w of this.#watchers) {
      if (w.def !== store.def || !matchesWatch(w, obj)) continue
      w.res.write(JSON.stringify({ type, object: obj }) + '\n')
    }
  }

  // ───────────── HTTP ─────────────

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x')
    this.requests.push({ method: req.method ?? 'GET', path: url.pathname, query: url.search, authorization: req.headers.authorization ?? '' })
    const seen: HangMatch = { method: req.method ?? 'GET', path: url.pathname, authorization: req.headers.authorization ?? '', query: url.searchParams }
    const tokens = this.#tokens
    if (tokens !== null && !tokens.has(/^Bearer (.*)$/.exec(seen.authorization)?.[1] ?? '')) {
      req.resume()
      return status(res, 401, 'Unauthorized', 'Unauthorized')
    }
    const throttle = this.#throttle
    if (throttle !== null && throttle.left > 0 && throttle.match(seen)) {
      throttle.left--
      req.resume()
      if (throttle.retryAfter !== null) res.setHeader('retry-after', throttle.retryAfter)
      if (throttle.code === 503) return status(res, 503, 'ServiceUnavailable', 'the apiserver is shutting down, please try again later')
      return status(res, 429, 'TooManyRequests', 'Too many requests, please try again later.')
    }
    const refuse = this.#refuse
    if (refuse !== null && refuse.match(seen)) {
      req.resume()
      return refused(res, refuse.code, seen)
    }
    if (this.#hang?.(seen) === true) {
      req.resume()
      this.#held.add(res)
      res.on('close', () => this.#held.delete(res))
      return
    }
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      let body: unknown = null
      if (chunks.length > 0) {
        try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')) } catch { return status(res, 400, 'BadRequest', 'body is not JSON') }
      }
      try {
        this.#route(req, res, url, body)
      } catch (err) {
        status(res, 500, 'InternalError', err instanceof Error ? err.message : String(err))
      }
    })
  }

  #route(req: http.IncomingMessage, res: http.ServerResponse, url: URL, body: unknown): void {
    const parts = url.pathname.split('/').filter((p) => p !== '')
    let group: string
    let rest: string[]
    if (parts[0] === 'api' && parts[1] === 'v1') { group = ''; rest = parts.slice(2) }
    else if (parts[0] === 'apis' && parts.length >= 3) { group = parts[1] as string; rest = parts.slice(3) }
    else return status(res, 404, 'NotFound', `no route ${url.pathname}`)
    let namespace: string | null = null
    if (rest[0] === 'namespaces' && rest.length >= 3) { namespace = rest[1] as string; rest = rest.slice(2) }
    const [plural, name, sub] = rest as [string, string | undefined, string | undefined]
    const method = req.method ?? 'GET'
    if (this.#rules !== null) {
      // kube-apiserver's verbs: GET of one object is get, of a collection list (watch with ?watch=true).
      const verb = name === undefined
        ? (method === 'GET' ? (url.searchParams.get('watch') === 'true' ? 'watch' : 'list') : method === 'POST' ? 'create' : method === 'DELETE' ? 'deletecollection' : method.toLowerCase())
        : ({ GET: 'get', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[method] ?? method.toLowerCase()
      const resource = sub === undefined ? plural : `${plural}/${sub}`
      if (!this.#rules.some((r) => grants(r, group, resource, verb, name))) {
        return status(res, 403, 'Forbidden', `${resource}${group === '' ? '' : `.${group}`} is forbidden: User "fake" cannot ${verb} resource "${resource}" in API group "${group}"`)
      }
    }
    const store = this.#stores.get(`${group}/${plural}`)
    if (store === undefined || this.#hidden.has(plural) || (group !== '' && parts[2] !== store.def.version)) {
      return status(res, 404, 'NotFound', `the server could not find the requested resource (${url.pathname})`)
    }
    // Decoding as the API server does it: a Lease's times are MicroTime, RFC 3339 with exactly six
    // fractional digits (metav1.MicroTime's layout); anything else fails the request with 400.
    if (store.def.kind === 'Lease' && (req.method === 'POST' || req.method === 'PUT' || req.method === 'PATCH')) {
      const spec = ((body ?? {}) as Obj).spec as Record<string, unknown> | undefined
      for (const field of ['acquireTime', 'renewTime']) {
        const v = spec?.[field]
        if (v !== undefined && v !== null && (typeof v !== 'string' || !MICRO_TIME.test(v))) {
          return status(res, 400, 'BadRequest', `Lease in version "v1" cannot be handled as a Lease: parsing time ${JSON.stringify(v)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse ${JSON.stringify(v)} as ".000000"`)
        }
      }
    }
    if (this.#forbidden.has(plural)) return status(res, 403, 'Forbidden', `${plural} is forbidden: User "fake" cannot ${req.method} resource "${plural}"`)
    const def = store.def
    if (name === undefined) {
      if (method === 'GET' && url.searchParams.get('watch') === 'true') return this.#watch(store, namespace, url, res)
      if (method === 'GET') return this.#list(store, namespace, url, res)
      if (method === 'POST') {
        const obj = body as Obj
        if (obj?.metadata === undefined) return status(res, 400, 'BadRequest', 'metadata required')
        if (def.namespaced) obj.metadata.namespace = namespace ?? obj.metadata.namespace
        if (obj.metadata.name === undefined && typeof obj.metadata.generateName === 'string') obj.metadata.name = `${obj.metadata.generateName}${this.#rv.toString(36)}`
        // A Lease's name is a DNS subdomain (apimachinery ValidateObjectMeta, NameIsDNSSubdomain): 422 otherwise.
        if (def.kind === 'Lease' && !DNS_SUBDOMAIN.test(String(obj.metadata.name ?? ''))) {
          return status(res, 422, 'Invalid', `Lease.coordination.k8s.io ${JSON.stringify(String(obj.metadata.name))} is invalid: metadata.name: Invalid value: ${JSON.stringify(String(obj.metadata.name))}: must be no more than 253 characters, and a lowercase RFC 1123 subdomain`)
        }
        const key = this.#key(def, obj.metadata.namespace as string, String(obj.metadata.name))
        if (store.objects.has(key)) return status(res, 409, 'AlreadyExists', `${plural} "${String(obj.metadata.name)}" already exists`)
        obj.apiVersion = apiVersionOf(def); obj.kind = def.kind
        delete obj.metadata.resourceVersion
        return json(res, 201, this.#create(store, clone(obj)))
      }
      return status(res, 405, 'MethodNotAllowed', method)
    }
    const key = this.#key(def, namespace ?? undefined, name)
    const current = store.objects.get(key)
    if (current === undefined) return status(res, 404, 'NotFound', `${plural} "${name}" not found`)
    if (sub !== undefined && sub !== 'status') return status(res, 404, 'NotFound', `no subresource ${sub}`)
    if (method === 'GET') return json(res, 200, current)
    if (method === 'DELETE') { this.#delete(store, key, current); return json(res, 200, current) }
    if (method !== 'PUT' && method !== 'PATCH') return status(res, 405, 'MethodNotAllowed', method)
    const incoming = (body ?? {}) as Obj
    const rv = (incoming.metadata as Record<string, unknown> | undefined)?.resourceVersion
    if (method === 'PUT' && rv !== undefined && rv !== '' && rv !== current.metadata.resourceVersion) {
      return status(res, 409, 'Conflict', `Operation cannot be fulfilled on ${plural} "${name}": the object has been modified; please apply your changes to the latest version and try again`)
    }
    if (method === 'PATCH' && rv !== undefined && rv !== current.metadata.resourceVersion) {
      return status(res, 409, 'Conflict', `Operation cannot be fulfilled on ${plural} "${name}": the object has been modified`)
    }
    const next = clone(current)
    if (sub === 'status') {
      // The status subresource changes status only (metadata and spec writes are ignored).
      next.status = method === 'PUT' ? incoming.status : mergePatch(current.status, incoming.status)
      // metav1.Condition's schema, in every Gateway API and Envoy Gateway CRD: message maxLength 32768.
      const group = def.group === '' ? '' : `.${def.group}`
      const long = tooLongMessage(next.status, 'status')
      if (long !== null) {
        return status(res, 422, 'Invalid', `${def.kind}${group} ${JSON.stringify(name)} is invalid: ${long}: Too long: may not be more than ${CONDITION_MESSAGE_MAX} bytes`)
      }
      const addresses = (next.status as Record<string, unknown> | undefined)?.addresses
      if (def.kind === 'Gateway' && Array.isArray(addresses) && addresses.length > 16) {
        return status(res, 422, 'Invalid', `${def.kind}${group} ${JSON.stringify(name)} is invalid: status.addresses: Too many: ${addresses.length}: must have at most 16 items`)
      }
      // Gateway API's PolicyStatus (BackendTLSPolicy, and Envoy Gateway's policies) holds at most 16 ancestors, RouteStatus 32 parents.
      for (const [field, max] of [['ancestors', 16], ['parents', ROUTE_KINDS.has(def.kind) ? 32 : Number.POSITIVE_INFINITY]] as const) {
        const list = (next.status as Record<string, unknown> | undefined)?.[field]
        if (Array.isArray(list) && list.length > max && (field === 'parents' || POLICY_CRDS.has(`${def.kind}${group}`))) {
          return status(res, 422, 'Invalid', `${def.kind}${group} ${JSON.stringify(name)} is invalid: status.${field}: Too many: ${list.length}: must have at most ${max} items`)
        }
      }
    } else {
      const merged = method === 'PUT' ? clone(incoming) : mergePatch(current, incoming) as Obj
      merged.metadata = { ...merged.metadata, uid: current.metadata.uid, generation: current.metadata.generation }
      if (JSON.stringify(merged.spec) !== JSON.stringify(current.spec)) merged.metadata.generation = (current.metadata.generation as number) + 1
      if (merged.status === undefined && current.status !== undefined && def.kind !== 'Lease' && def.kind !== 'Event') merged.status = current.status
      Object.assign(next, merged)
      for (const k of Object.keys(next)) if (!(k in merged)) delete (next as Record<string, unknown>)[k]
    }
    if (JSON.stringify(next) === JSON.stringify(current)) return json(res, 200, current) // a no-op write keeps the resourceVersion
    return json(res, 200, this.#update(store, key, next, current))
  }

  #list(store: Store, namespace: string | null, url: URL, res: http.ServerResponse): void {
    const limit = Number(url.searchParams.get('limit') ?? 0)
    const token = url.searchParams.get('continue')
    let listing: { readonly items: Obj[]; readonly rv: number }
    let offset = 0
    if (token !== null && token !== '') {
      const [id, off] = token.split(':')
      const found = this.#listings.get(id as string)
      if (found === undefined) return status(res, 410, 'Expired', 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.')
      listing = found
      offset = Number(off)
    } else {
      const rv = url.searchParams.get('resourceVersion')
      const match = url.searchParams.get('resourceVersionMatch')
      // An unset match with a limit is the legacy "Exact" (read from etcd at that revision).
      const exact = match === 'Exact' || ((match === null || match === '') && limit > 0)
      if (rv !== null && rv !== '' && rv !== '0' && Number(rv) > this.#rv) return tooLarge(res, rv, this.#rv)
      if (rv !== null && rv !== '' && rv !== '0' && exact && Number(rv) < this.#compactedRv) {
        return status(res, 410, 'Expired', `too old resource version: ${rv} (${this.#compactedRv})`)
      }
      const selector = parseSelector(url.searchParams.get('labelSelector'))
      const fields = parseFieldSelector(store.def, url.searchParams.get('fieldSelector'))
      if (typeof fields === 'string') return status(res, 400, 'BadRequest', fields)
      const items = [...store.objects.values()]
        .filter((o) => namespace === null || o.metadata.namespace === namespace)
        .filter((o) => selector === null || selector(labelsOf(o)))
        .filter((o) => fields === null || fields(fieldsOf(o)))
        .sort((a, b) => this.#key(store.def, a.metadata.namespace as string, a.metadata.name as string) < this.#key(store.def, b.metadata.namespace as string, b.metadata.name as string) ? -1 : 1)
        .map(clone)
      listing = { items, rv: this.#rv }
    }
    const end = limit > 0 ? Math.min(offset + limit, listing.items.length) : listing.items.length
    let next = ''
    if (end < listing.items.length) {
      const id = token === null || token === '' ? String(this.#nextListing++) : (token.split(':')[0] as string)
      this.#listings.set(id, listing)
      next = `${id}:${end}`
    }
    json(res, 200, {
      apiVersion: apiVersionOf(store.def), kind: `${store.def.kind}List`,
      metadata: { resourceVersion: String(listing.rv), ...(next === '' ? {} : { continue: next }) },
      items: listing.items.slice(offset, end),
    })
  }

  #watch(store: Store, namespace: string | null, url: URL, res: http.ServerResponse): void {
    const rvParam = url.searchParams.get('resourceVersion') ?? ''
    const fields = parseFieldSelector(store.def, url.searchParams.get('fieldSelector'))
    if (typeof fields === 'string') return status(res, 400, 'BadRequest', fields)
    const w: Watcher = {
      res, def: store.def, namespace, selector: parseSelector(url.searchParams.get('labelSelector')), fields,
      bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true', silent: false,
    }
    const from = Number(rvParam)
    const tooOld = rvParam !== '' && rvParam !== '0' && (!Number.isFinite(from) || from < this.#compactedRv)
    if (tooOld && this.goneAs === 'http') return status(res, 410, 'Expired', `too old resource version: ${rvParam} (${this.#compactedRv})`)
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' })
    const failure = this.watchErrors.get(store.def.plural)
    if (failure !== undefined) {
      res.end(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', ...failure } }) + '\n')
      return
    }
    if (tooOld) {
      res.end(JSON.stringify({ type: 'ERROR', object: gone(`too old resource version: ${rvParam} (${this.#compactedRv})`) }) + '\n')
      return
    }
    if (rvParam === '' || rvParam === '0') {
      // "Any" resourceVersion: the current state as synthetic ADDED events, then changes.
      for (const o of store.objects.values()) if (matchesWatch(w, o)) res.write(JSON.stringify({ type: 'ADDED', object: o }) + '\n')
    } else {
      for (const e of store.history) {
        if (e.rv > from && matchesWatch(w, e.object)) res.write(JSON.stringify({ type: e.type, object: e.object }) + '\n')
      }
    }
    if (this.endWatchesAtOnce) { res.end(); return }
    this.#watchers.add(w)
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? 0)
    const timer = timeout > 0 ? setTimeout(() => { if (w.silent) return; this.#watchers.delete(w); res.end() }, timeout * 1000) : null
    res.on('close', () => { this.#watchers.delete(w); this.#silenced.delete(w); if (timer !== null) clearTimeout(timer) })
  }
}

export function apiVersionOf(def: ResourceDef): string {
  return def.group === '' ? def.version : `${def.group}/${def.version}`
}

/** Whether an RBAC rule grants `verb` on `resource` (`plural` or `plural/subresource`) of `group`. */
function grants(rule: PolicyRule, group: string, resource: string, verb: string, name: string | undefined): boolean {
  const has = (list: readonly string[] | undefined, v: string): boolean => list !== undefined && (list.includes(v) || list.includes('*'))
  if (!has(rule.apiGroups, group) || !has(rule.resources, resource) || !has(rule.verbs, verb)) return false
  return rule.resourceNames === undefined || rule.resourceNames.length === 0 || (name !== undefined && rule.resourceNames.includes(name))
}

function labelsOf(o: Obj): Record<string, string> {
  return (o.metadata.labels ?? {}) as Record<string, string>
}

function matchesWatch(w: Watcher, o: Obj): boolean {
  if (w.namespace !== null && o.metadata.namespace !== w.namespace) return false
  if (w.fields !== null && !w.fields(fieldsOf(o))) return false
  return w.selector === null || w.selector(labelsOf(o))
}

/** The fields a field selector may name: every kind's name and namespace, a Secret's type. */
function fieldsOf(o: Obj): Record<string, string> {
  const out: Record<string, string> = { 'metadata.name': String(o.metadata.name ?? ''), 'metadata.namespace': String(o.metadata.namespace ?? '') }
  if (o.kind === 'Secret') out.type = String((o as { type?: unknown }).type ?? 'Opaque')
  return out
}

/** A field selector, or the API server's message for a field it does not index (a 400). */
function parseFieldSelector(def: ResourceDef, text: string | null): Selector | null | string {
  if (text === null || text.trim() === '') return null
  const allowed = new Set(['metadata.name', 'metadata.namespace', ...(def.kind === 'Secret' ? ['type'] : [])])
  for (const term of text.split(',')) {
    const field = term.split(/!?==?/)[0]?.trim() ?? ''
    if (!allowed.has(field)) return `"${field}" is not a known field selector: only "${[...allowed].join('", "')}"`
  }
  return parseSelector(text)
}

type Selector = (labels: Record<string, string>) => boolean

/** `a=b`, `a==b`, `a!=b`, `a`, `!a`, comma-separated (the set-based forms are not needed here). */
function parseSelector(text: string | null): Selector | null {
  if (text === null || text.trim() === '') return null
  const terms = text.split(',').map((t) => t.trim()).filter((t) => t !== '').map((t): Selector => {
    const ne = t.indexOf('!=')
    if (ne > 0) { const k = t.slice(0, ne); const v = t.slice(ne + 2); return (l) => l[k] !== v }
    const eq = t.indexOf('=')
    if (eq > 0) { const k = t.slice(0, eq); const v = t.slice(t[eq + 1] === '=' ? eq + 2 : eq + 1); return (l) => l[k] === v }
    if (t.startsWith('!')) { const k = t.slice(1); return (l) => !Object.hasOwn(l, k) }
    return (l) => Object.hasOwn(l, t)
  })
  return (labels) => terms.every((s) => s(labels))
}

/** An error answer for `r` in kube-apiserver's words (apiserver/pkg/endpoints/handlers/responsewriters, apimachinery errors). */
function refused(res: http.ServerResponse, code: number, r: HangMatch): void {
  const parts = r.path.split('/').filter((p) => p !== '')
  const ns = parts.indexOf('namespaces')
  const rest = ns >= 0 ? parts.slice(ns + 2) : parts.slice(parts[0] === 'api' ? 2 : 3)
  const group = parts[0] === 'apis' ? parts[1] as string : ''
  const [plural = '', name = '', sub] = rest
  const resource = sub === undefined ? plural : `${plural}/${sub}`
  const verb = ({ GET: name === '' ? 'list' : 'get', POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[r.method] ?? r.method.toLowerCase()
  const qualified = group === '' ? plural : `${plural}.${group}`
  const where = ns >= 0 ? ` in the namespace "${parts[ns + 1] as string}"` : ''
  if (code === 403) return status(res, 403, 'Forbidden', `${qualified} "${name}" is forbidden: User "system:serviceaccount:sallyport-system:sallyport" cannot ${verb} resource "${resource}" in API group "${group}"${where}`)
  if (code === 409) return status(res, 409, 'Conflict', `Operation cannot be fulfilled on ${qualified} "${name}": the object has been modified; please apply your changes to the latest version and try again`)
  if (code === 422) return status(res, 422, 'Invalid', `${qualified} "${name}" is invalid: status: Invalid value: "object": the status was refused by validation`)
  if (code === 503) return status(res, 503, 'ServiceUnavailable', 'the server is currently unable to handle the request')
  if (code === 410) return status(res, 410, 'Expired', `too old resource version: ${r.query.get('resourceVersion') ?? ''}`)
  // An API server whose watch cache is behind the resourceVersion asked for (another replica of an HA control plane, an etcd restored from a backup).
  if (code === 504) return tooLarge(res, r.query.get('resourceVersion') ?? '', 0)
  return status(res, code, 'InternalError', `Internal error occurred: failed calling webhook "validate.example.com": connection refused`)
}

/** kube-apiserver's answer to a resourceVersion its watch cache has not reached (apimachinery NewTooLargeResourceVersionError). */
function tooLarge(res: http.ServerResponse, asked: string, current: number): void {
  json(res, 504, {
    kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', reason: 'Timeout', code: 504,
    message: `Timeout: Too large resource version: ${asked}, current: ${current}`,
    details: { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 },
  })
}

function gone(message: string): Record<string, unknown> {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason: 'Expired', code: 410 }
}

function json(res: http.ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

const ROUTE_KINDS = new Set(['HTTPRoute', 'GRPCRoute', 'TCPRoute', 'TLSRoute'])
/** Upstream CRDs whose status is a PolicyStatus (ancestors: maxItems 16). */
const POLICY_CRDS = new Set(['BackendTLSPolicy.gateway.networking.k8s.io', 'BackendTrafficPolicy.gateway.envoyproxy.io'])

/** metav1.Condition `message`: `+kubebuilder:validation:MaxLength=32768` (counted in characters). */
const CONDITION_MESSAGE_MAX = 32768

/** The path of the first condition message in `v` longer than metav1.Condition allows, or null. */
function tooLongMessage(v: unknown, at: string): string | null {
  if (Array.isArray(v)) {
    for (const [i, e] of v.entries()) {
      const found = tooLongMessage(e, `${at}[${i}]`)
      if (found !== null) return found
    }
    return null
  }
  if (typeof v !== 'object' || v === null) return null
  for (const [k, e] of Object.entries(v)) {
    if (k === 'conditions' && Array.isArray(e)) {
      for (const [i, c] of e.entries()) {
        const message = (c as { message?: unknown } | null)?.message
        if (typeof message === 'string' && [...message].length > CONDITION_MESSAGE_MAX) return `${at}.conditions[${i}].message`
      }
    }
    const found = tooLongMessage(e, `${at}.${k}`)
    if (found !== null) return found
  }
  return null
}

function status(res: http.ServerResponse, code: number, reason: string, message: string): void {
  json(res, code, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code })
}

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return clone(patch)
  const out: Record<string, unknown> = typeof target === 'object' && target !== null && !Array.isArray(target) ? clone(target as Record<string, unknown>) : {}
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k]
    else out[k] = mergePatch(out[k], v)
  }
  return out
}
