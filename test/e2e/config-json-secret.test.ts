// The real CLI with a JSON Secret that has a syntax error (a single-quoted
// value): `validate`, the serve log and /config_dump name the line and column
// and never show the Secret's text (V8's JSON.parse messages quote the input).
// The same for a YAML Secret whose value follows its block scalar header on one
// line (`token: |-sk-...`, the yaml library's message quoted it whole).
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, request, runCli, settleLogs, startCli, tempDir } from './harness.ts'

const SECRET_TEXT = 'k9X2qT7w'
const YAML_SECRET = 'sk-live-R4nd0mV4lue'
const BROKEN_YAML = `apiVersion: v1
kind: Secret
metadata:
  name: other-key
  namespace: default
stringData:
  token: |-${YAML_SECRET}
`
const BROKEN = `{
  "apiVersion": "v1",
  "kind": "Secret",
  "metadata": { "name": "provider-key", "namespace": "default" },
  "stringData": { "token": '${SECRET_TEXT}' },
  "type": "Opaque"
}
`

t.test('CLI: a syntax error in a Secret (JSON, YAML) names its line and never shows the value', async (t) => {
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, '00-gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, '10-secret.json'), BROKEN)
  fs.writeFileSync(path.join(dir, '30-secret.yaml'), BROKEN_YAML)
  // A byte order mark (Windows editors write one) is no syntax error.
  fs.writeFileSync(path.join(dir, '20-bom.json'), '\uFEFF' + JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'bom', namespace: 'default' } }))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1, 'validate fails on the syntax error')
  t.match(v.stdout, /10-secret\.json:0: .*line 5, column 28: invalid JSON/, 'validate names line and column')
  t.notMatch(v.stdout + v.stderr, new RegExp(SECRET_TEXT), 'validate never prints the value')
  t.match(v.stdout, /30-secret\.yaml:0: .*line 7, column \d+: Block scalar header includes extra characters\n/, 'the YAML Secret: its line, the fixed part of the message')
  t.notMatch(v.stdout + v.stderr, new RegExp(YAML_SECRET), 'never its value')
  t.notMatch(v.stdout + v.stderr, /20-bom\.json/, 'the BOM file is read')

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  await cli.waitFor(/cannot load configuration file/)
  // /readyz can answer before the dump lists the first table's problems.
  const dump = await eventually(() => request(`http://127.0.0.1:${adminPort}/config_dump`), (r) => r.body.includes('10-secret.json'), 10000, 'problem in /config_dump')
  t.match(dump.body, /line 5, column 28: invalid JSON/, '/config_dump lists the problem with its line')
  t.notMatch(dump.body, new RegExp(SECRET_TEXT), '/config_dump never shows the value')
  t.notMatch(dump.body, new RegExp(YAML_SECRET), 'nor the YAML one')
  await settleLogs()
  const logs = cli.stdout() + cli.stderr()
  t.match(logs, /10-secret\.json.*line 5, column 28: invalid JSON/, 'the log names the line')
  t.notMatch(logs, new RegExp(SECRET_TEXT), 'the log never shows the value')
  t.notMatch(logs, new RegExp(YAML_SECRET), 'nor the YAML one')
  t.notMatch(logs, /20-bom\.json/, 'no problem for the BOM file')
})
