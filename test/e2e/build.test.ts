// `npm run build` (scripts/build.ts) makes the production form the Dockerfile
// runs: plain JavaScript in dist/ beside the schemas and quickstart files.
// The built CLI must validate, serve and proxy like the sources do.
import t from 'tap'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { ROOT, backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'

t.test('the built CLI (dist/bin/sallyport.js) validates, serves and proxies', async (t) => {
  const out = path.join(tempDir(t), 'dist')
  execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'build.ts'), out], { cwd: ROOT, stdio: 'pipe', timeout: 120_000 })
  const bin = path.join(out, 'bin', 'sallyport.js')
  // As in the image: production dependencies beside the build.
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(out, 'node_modules'))
  t.ok(fs.existsSync(bin), 'dist/bin/sallyport.js')
  t.ok(fs.existsSync(path.join(out, 'schemas')) && fs.existsSync(path.join(out, 'fixtures', 'quickstart')), 'schemas and the quickstart beside it')
  t.notOk(fs.readdirSync(path.join(out, 'lib', 'router')).some((f) => f.endsWith('.ts')), 'no TypeScript left to strip')
  const imports = fs.readFileSync(path.join(out, 'lib', 'runtime', 'serve.js'), 'utf8')
  t.notMatch(imports, /from ['"][^'"]+\.ts['"]/, 'relative imports point at .js')

  const validate = execFileSync(process.execPath, [bin, 'validate', path.join(ROOT, 'fixtures', 'quickstart')], { encoding: 'utf8', stdio: 'pipe' })
  t.equal(validate, '', 'the quickstart validates with the built schemas')

  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'built' })
  t.teardown(() => upstream.close())
  const [port, admin] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), [gatewayYaml(port), backendYaml('up', upstream.address.port), routeYaml('r', 'built.example.test', 'up', upstream.address.port)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${admin}`], { bin })
  await eventually(() => request(`http://127.0.0.1:${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const r = await request(`http://127.0.0.1:${port}/hello`, { host: 'built.example.test' })
  t.equal(r.status, 200, 'proxied through the built gateway')
  t.equal((JSON.parse(r.body) as { path: string }).path, '/hello')
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'drains and exits 0')
})
