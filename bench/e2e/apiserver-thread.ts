// The in-repo fake API server (test/helpers/fake-apiserver.ts) on a worker
// thread of its own, for benches that time the Kubernetes source. In
// production the API server is another process: run in the gateway's own
// isolate, its copies of every object and its event history (two more copies
// of a 5,000-route configuration) sat in the heap the gateway's GC marks, and
// its request handling in the event loop the gateway serves from. A worker
// has its own isolate, heap and event loop.
import { Worker, isMainThread, parentPort } from 'node:worker_threads'

type Request = { readonly op: 'start' } | { readonly op: 'apply'; readonly objects: readonly unknown[] } | { readonly op: 'stop' }
type Op = Request & { readonly id: number }
type Reply = { readonly id: number; readonly kubeconfig?: string; readonly error?: string }

export class ApiServerThread {
  readonly #worker = new Worker(new URL(import.meta.url))
  #next = 0
  readonly #waiting = new Map<number, (r: Reply) => void>()

  constructor() {
    this.#worker.on('message', (r: Reply) => { this.#waiting.get(r.id)?.(r); this.#waiting.delete(r.id) })
  }

  #call(op: Request): Promise<Reply> {
    const id = this.#next++
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, (r) => (r.error === undefined ? resolve(r) : reject(new Error(r.error))))
      this.#worker.postMessage({ ...op, id })
    })
  }

  /** Listens on a loopback port; resolves to a kubeconfig for it. */
  async start(): Promise<string> {
    return (await this.#call({ op: 'start' })).kubeconfig as string
  }

  /** Creates or replaces the objects (each a watch event, streamed at once). */
  async apply(...objects: readonly unknown[]): Promise<void> {
    await this.#call({ op: 'apply', objects })
  }

  async stop(): Promise<void> {
    await this.#call({ op: 'stop' })
    await this.#worker.terminate()
  }
}

if (!isMainThread && parentPort !== null) {
  const port = parentPort
  const { FakeApiServer } = await import('../../test/helpers/fake-apiserver.ts')
  const { FAKE_RESOURCES } = await import('../../test/kube/fixtures.ts')
  const fake = new FakeApiServer(FAKE_RESOURCES)
  port.on('message', async (m: Op) => {
    try {
      if (m.op === 'start') { await fake.start(); port.postMessage({ id: m.id, kubeconfig: fake.kubeconfig() }) }
      else if (m.op === 'apply') { for (const o of m.objects) fake.apply(o as Parameters<typeof fake.apply>[0]); port.postMessage({ id: m.id }) }
      else { await fake.stop(); port.postMessage({ id: m.id }) }
    } catch (err) {
      port.postMessage({ id: m.id, error: String(err) })
    }
  })
}
