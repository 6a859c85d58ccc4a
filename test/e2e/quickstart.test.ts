// `npm start` runs `sallyport quickstart`: the curl command it prints must work.
import t from 'tap'
import net from 'node:net'
import { request, startCli } from './harness.ts'

async function isFree(port: number): Promise<boolean> {
  const server = net.createServer()
  return new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

// The quickstart's ports are fixed (they are in the printed curl command): a busy one is a skip, said so.
let busy: number | null = null
for (const port of [8080, 9080, 9901]) if (busy === null && !(await isFree(port))) busy = port

t.test('quickstart prints a curl command that goes through the gateway', { skip: busy === null ? false : `port ${busy} is in use on this machine` }, async (t) => {
  const cli = startCli(t, ['quickstart'])
  const line = await cli.waitFor(/curl [^\n]+/, 20000)
  const host = /-H 'Host: ([^']+)'/.exec(line)?.[1]
  const url = /(http:\/\/127\.0\.0\.1:\d+\/\S*)/.exec(line)?.[1]
  t.ok(host !== undefined && url !== undefined, line)
  const r = await request(url as string, { host: host as string })
  t.equal(r.status, 200)
  const echo = JSON.parse(r.body) as { method: string; path: string; headers: Record<string, string> }
  t.equal(echo.method, 'GET')
  t.equal(echo.path, '/get')
  t.equal(echo.headers['x-sallyport-demo'], 'quickstart')
  t.equal((await request('http://127.0.0.1:9901/readyz')).status, 200)
  cli.child.kill('SIGINT')
  t.equal(await cli.exited, 0)
})
