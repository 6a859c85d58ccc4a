// The data plane: holds the current RouteTable (one reference; requests read
// it once at arrival and keep it) and the HTTP/HTTPS listeners that table asks
// for. `apply` swaps the reference first, then opens new ports and closes
// removed ones without disturbing the others.

import { randomBytes } from 'node:crypto'
import { ErrorCode, SallyportError } from '../errors.ts'
import type { PortEntry, RouteTable } from '../compile/table.ts'
import type { Upstreams } from '../upstream/types.ts'
import { createAccessLog } from '../observe/access-log.ts'
import { logger, type Logger } from '../observe/log.ts'
import type { RouterEnv } from '../router/forward.ts'
import { defaultExtensionRuntime, type ExtensionRuntime } from '../extensions/chain.ts'
import { DEFAULT_LIMITS, PortListener, type HttpLimits, type PlaneContext } from './port-listener.ts'
import { SecureContexts } from './tls-contexts.ts'
import { ANY_ADDRESS } from '../bind.ts'
import { DEFAULT_L4_LIMITS, L4Listener, type L4Limits, type L4PlaneContext } from './tcp-listener.ts'

export type { HttpLimits, L4Limits }
export { DEFAULT_LIMITS, DEFAULT_L4_LIMITS }

const log = logger('data-plane')

/** Grace given to connections of a port that a new table removed. */
const PORT_CLOSE_GRACE_MS = 30_000

export interface DataPlaneOptions {
  /** Address to bind; default '::' (every address, both families: lib/bind.ts). */
  readonly bind: string
  readonly upstreams: Upstreams
  /** One pino JSON line per request on the `access` logger. */
  readonly accessLog: boolean
  readonly limits?: Partial<HttpLimits>
  /** TCP/TLS listeners (issue 8): connections per port, idle and ClientHello timeouts. */
  readonly l4Limits?: Partial<L4Limits>
  /** --max-connections: open client connections per listening port, every listener kind; overrides both limits'. */
  readonly maxConnections?: number
  /** Value of this gateway in the loop-detection hop header; default random per process. */
  readonly gatewayId?: string
  /** Issue 7: extension runtime (default: the process-wide one). */
  readonly extensions?: ExtensionRuntime
}

export interface ApplyResult {
  readonly failed: ReadonlyArray<{ readonly port: number; readonly error: SallyportError }>
}

export interface DataPlane {
  /** Swap in a table: one reference assignment, then open new ports / close removed ones. In-flight requests keep their table. */
  apply(table: RouteTable): Promise<ApplyResult>
  current(): RouteTable | null
  /** Bound ports (the table's port numbers) and their protocol. */
  listening(): ReadonlyArray<{ readonly port: number; readonly protocol: string }>
  /** Stop accepting, let in-flight requests finish within graceMs, then destroy what is left. */
  drain(graceMs: number): Promise<void>
}

export function createDataPlane(options: DataPlaneOptions): DataPlane {
  return new HttpDataPlane(options)
}

function served(entry: PortEntry): PortEntry['protocol'] {
  return entry.protocol
}

class HttpDataPlane implements DataPlane, PlaneContext, L4PlaneContext {
  readonly env: RouterEnv
  readonly limits: HttpLimits
  readonly l4Limits: L4Limits
  readonly contexts = new SecureContexts()
  readonly #bind: string
  readonly #listeners = new Map<number, PortListener | L4Listener>()
  /** Listeners a reload removed whose connections are still in their grace period: a drain ends them too. */
  readonly #retiring = new Set<PortListener | L4Listener>()
  #table: RouteTable | null = null
  #draining = false
  /** Serializes apply() calls so two swaps never race on the same port. */
  #applying: Promise<unknown> = Promise.resolve()

  constructor(options: DataPlaneOptions) {
    this.#bind = options.bind ?? ANY_ADDRESS
    const max = options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }
    this.limits = { ...DEFAULT_LIMITS, ...options.limits, ...max }
    this.l4Limits = { ...DEFAULT_L4_LIMITS, ...options.l4Limits, ...max }
    this.env = {
      upstreams: options.upstreams,
      gatewayId: options.gatewayId ?? randomBytes(6).toString('hex'),
      accessLog: createAccessLog(options.accessLog),
      extensions: options.extensions ?? defaultExtensionRuntime(),
    }
    this.accessLog = options.accessLog ? logger('access') : null
  }

  current(): RouteTable | null { return this.#table }

  get upstreams(): Upstreams { return this.env.upstreams }

  /** L4 listeners log one line per connection on the same `access` logger. */
  readonly accessLog: Logger | null

  apply(table: RouteTable): Promise<ApplyResult> {
    const run = this.#applying.then(() => this.#apply(table))
    this.#applying = run.catch(() => undefined)
    return run
  }

  async #apply(table: RouteTable): Promise<ApplyResult> {
    if (this.#draining) throw new SallyportError(ErrorCode.SHUTTING_DOWN, 'data plane is draining')
    // Issue 7: load plugins and build extension chains before any request can see the table.
    await (this.env.extensions as ExtensionRuntime).prepare(table).catch((err: unknown) => log.error({ err }, 'preparing extensions failed'))
    this.#table = table // the swap: every request from here on sees the new table
    const failed: Array<{ port: number; error: SallyportError }> = []
    const opening: Array<Promise<void>> = []

    for (const [port, listener] of this.#listeners) {
      const entry = table.ports.get(port)
      if (entry === undefined || served(entry) !== listener.protocol) {
        // Removed, or its protocol changed (reopened below): close() releases the
        // listening handle at once; its connections get a grace period.
        this.#listeners.delete(port)
        this.#retiring.add(listener)
        void listener.close(PORT_CLOSE_GRACE_MS).then(() => { this.#retiring.delete(listener) })
      }
    }

    for (const [port, entry] of table.ports) {
      const protocol = served(entry)
      const existing = this.#listeners.get(port)
      if (existing !== undefined) {
        existing.update(entry)
        continue
      }
      const listener = protocol === 'TCP' || protocol === 'TLS' ? new L4Listener(port, protocol, this) : new PortListener(port, protocol, this)
      opening.push(listener.listen(this.#bind, entry).then(
        () => { this.#listeners.set(port, listener) },
        (err: Error) => {
          log.error({ port, listeners: entry.listeners.map((l) => `${l.gateway}/${l.name}`), err: err.message }, 'listen failed')
          failed.push({ port, error: new SallyportError(ErrorCode.LISTEN, `cannot listen on ${this.#bind}:${port}: ${err.message}`, { cause: err }) })
        },
      ))
    }
    await Promise.all(opening)
    this.contexts.retain(table)
    this.env.upstreams.retain(table)
    return { failed }
  }

  listening(): ReadonlyArray<{ readonly port: number; readonly protocol: string }> {
    const out: Array<{ port: number; protocol: string }> = []
    for (const l of this.#listeners.values()) out.push({ port: l.port, protocol: l.protocol })
    return out.sort((a, b) => a.port - b.port)
  }

  async drain(graceMs: number): Promise<void> {
    this.#draining = true
    // A port a reload removed is closed again with the drain's grace period, which
    // may end before its own: the process exits then, and would cut its
    // connections unaccounted (an orderly FIN, no access line).
    const listeners = [...this.#listeners.values(), ...this.#retiring]
    this.#listeners.clear()
    await Promise.all(listeners.map((l) => l.close(graceMs)))
  }
}
