// sallyport under test: writes a Gateway API config directory for the bench and
// starts `sallyport serve` on it (the CLI contract: serve --config DIR --admin
// ADDR:PORT --bind ADDR --access-log on|off --workers N).
//
// "Every feature on" (the condition for the targets) means the route
// carries header filters and timeouts, and a BackendTrafficPolicy adds retries,
// timeouts, a circuit breaker, active and passive health checks, a balancer and
// a local rate limit set far above the load (so it is evaluated, never hit).

import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { inCgroup, pinned, startProc, stopProc, waitForHttp, tailOf } from './procs.ts'
import type { MemoryCgroup, Proc } from './procs.ts'

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
let built: string | null = null

/**
 * The sallyport the benches measure: the production build (dist/, `npm run
 * build`, what the Dockerfile runs), built once per bench process.
 * SALLYPORT_BENCH_SOURCE=1 runs the TypeScript sources instead.
 */
export function sallyportBin(): string {
  if (process.env.SALLYPORT_BENCH_SOURCE === '1') return path.join(REPO_ROOT, 'bin', 'sallyport.ts')
  if (built === null) {
    execFileSync(process.execPath, [path.join(REPO_ROOT, 'scripts', 'build.ts')], { stdio: 'ignore', cwd: REPO_ROOT })
    built = path.join(REPO_ROOT, 'dist', 'bin', 'sallyport.js')
  }
  return built
}

/** Node flags the Dockerfile starts sallyport with (README "Memory"); SALLYPORT_BENCH_NODE_FLAGS replaces them. */
export function sallyportNodeFlags(): string[] {
  return (process.env.SALLYPORT_BENCH_NODE_FLAGS ?? '--max-semi-space-size=8').split(' ').filter((f) => f !== '')
}

/**
 * The environment the image gives sallyport (Dockerfile ENV): production mode
 * and two glibc malloc arenas. SALLYPORT_BENCH_MALLOC_ARENA_MAX replaces the
 * arena count ('' leaves glibc's default, up to 8 per core).
 */
export function sallyportEnv(): NodeJS.ProcessEnv {
  const arenas = process.env.SALLYPORT_BENCH_MALLOC_ARENA_MAX ?? '2'
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production' }
  if (arenas === '') delete env.MALLOC_ARENA_MAX
  else env.MALLOC_ARENA_MAX = arenas
  return env
}

/** `node [flags] sallyport` as the image runs it; append the CLI arguments. */
export function sallyportCommand(): string[] {
  return [process.execPath, ...sallyportNodeFlags(), sallyportBin()]
}

export type FeatureSet = 'all' | 'min'

export interface GatewayConfig {
  readonly dir: string
  readonly listenPort: number
  /** The nginx origin (HTTP/1.1). */
  readonly originPort: number
  /** The Node 1 GiB upstream, routed under /big. */
  readonly bigPort: number
  readonly features: FeatureSet
}

const GATEWAY = (port: number): string => `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: sallyport
spec:
  controllerName: sallyport.io/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: bench
  namespace: default
  annotations:
    # The origin is on loopback, which the destination guard refuses unless allowed.
    sallyport.io/allow-destination-cidrs: 127.0.0.0/8
spec:
  gatewayClassName: sallyport
  listeners:
    - name: http
      protocol: HTTP
      port: ${port}
      allowedRoutes:
        namespaces:
          from: Same
`

const BACKEND = (name: string, port: number): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - ip:
        address: 127.0.0.1
        port: ${port}
`

function route(cfg: GatewayConfig): string {
  const all = cfg.features === 'all'
  const filters = all
    ? `      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set:
              - name: x-bench
                value: sallyport
            remove:
              - x-unwanted
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            add:
              - name: x-served-by
                value: sallyport
`
    : ''
  const timeouts = all
    ? `      timeouts:
        request: 60s
`
    : ''
  // The 1 GiB transfers need no request timeout shorter than they take.
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: bench
  namespace: default
spec:
  parentRefs:
    - name: bench
  rules:
    - matches:
        - path:
            type: PathPrefix
            value: /big
${filters}      backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: big-upstream
          port: ${cfg.bigPort}
    - matches:
        - path:
            type: PathPrefix
            value: /
${filters}${timeouts}      backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: origin
          port: ${cfg.originPort}
`
}

const POLICY = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: bench
  namespace: default
spec:
  targetRefs:
    - group: gateway.networking.k8s.io
      kind: HTTPRoute
      name: bench
  retry:
    numRetries: 2
    retryOn:
      triggers: [connect-failure, refused-stream, retriable-status-codes]
      httpStatusCodes: [503]
    perRetry:
      timeout: 30s
      backOff:
        baseInterval: 25ms
        maxInterval: 250ms
  timeout:
    tcp:
      connectTimeout: 5s
    http:
      connectionIdleTimeout: 120s
  circuitBreaker:
    maxConnections: 100000
    maxPendingRequests: 100000
    maxParallelRequests: 100000
  healthCheck:
    active:
      type: HTTP
      interval: 5s
      timeout: 1s
      http:
        path: /healthz
    passive:
      consecutive5XxErrors: 1000
      interval: 10s
  loadBalancer:
    type: RoundRobin
  rateLimit:
    type: Local
    local:
      rules:
        - limit:
            requests: 100000000
            unit: Second
`

export function writeGatewayConfig(cfg: GatewayConfig): void {
  mkdirSync(cfg.dir, { recursive: true })
  writeFileSync(path.join(cfg.dir, 'gateway.yaml'), GATEWAY(cfg.listenPort))
  writeFileSync(path.join(cfg.dir, 'backends.yaml'), `${BACKEND('origin', cfg.originPort)}---\n${BACKEND('big-upstream', cfg.bigPort)}`)
  writeFileSync(path.join(cfg.dir, 'route.yaml'), route(cfg))
  if (cfg.features === 'all') writeFileSync(path.join(cfg.dir, 'policy.yaml'), POLICY)
}

export interface GatewayStart {
  readonly configDir: string
  readonly listenPort: number
  readonly adminPort: number
  /** null: the CLI default (one process, no cluster). */
  readonly workers: number | null
  readonly cores: string | null
  readonly accessLog: boolean
  readonly logPath: string
  /** Directory for --cpu-prof output; null = no profiling. */
  readonly cpuProfDir: string | null
  /** Memory cgroup to start sallyport in (node sizes its heap from the limit); null = none. */
  readonly memoryCgroup: MemoryCgroup | null
  /** Node flags after the image's (e.g. --inspect for bench/alloc-profile.ts). */
  readonly extraNodeFlags?: readonly string[]
  /** Another build's dist/bin/sallyport.js (bench/flags-ab.ts BIN=); default: this tree's build. */
  readonly bin?: string
  /** `serve` flags after the bench's own (bench/flags-ab.ts serve:--flag=value). */
  readonly serveArgs?: readonly string[]
}

/** Starts sallyport and waits until the listener answers /small with 200. */
export async function startGateway(opts: GatewayStart): Promise<Proc> {
  const nodeFlags = [...sallyportNodeFlags(), ...(opts.cpuProfDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir]), ...(opts.extraNodeFlags ?? [])]
  const args = [
    process.execPath, ...nodeFlags, opts.bin ?? sallyportBin(), 'serve',
    '--config', opts.configDir,
    '--admin', `127.0.0.1:${opts.adminPort}`,
    '--bind', '127.0.0.1',
    '--access-log', opts.accessLog ? 'on' : 'off',
  ]
  if (opts.workers !== null) args.push('--workers', String(opts.workers))
  args.push(...(opts.serveArgs ?? []))
  const proc = startProc('sallyport', inCgroup(opts.memoryCgroup, pinned(opts.cores, args)), opts.logPath, sallyportEnv())
  const ok = await waitForHttp(opts.listenPort, '/small', 30_000, proc)
  if (!ok) {
    await stopProc(proc)
    throw new Error(`sallyport did not serve GET /small with 200 within 30 s; log tail:\n${tailOf(opts.logPath)}`)
  }
  return proc
}
