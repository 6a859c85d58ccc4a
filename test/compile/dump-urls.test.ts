// /config_dump shows an extension's URLs (callouts, token endpoints, webhooks)
// without the values of their query strings: services take API keys there
// (`?key=`, `?token=`), and the dump is read by whoever operates the gateway.
import t from 'tap'
import { dumpTable } from '../../lib/compile/print.ts'
import type { RouteTable } from '../../lib/compile/table.ts'

t.test('URL query values are redacted in the dump; names, paths and other text stay', async (t) => {
  const table = {
    version: 1, extensionChains: [{ config: {
      url: 'https://hooks.example.com/v1/notify?token=abc123&channel=ops#frag',
      tokenUrl: 'https://auth.example.com/oauth/token',
      endpoint: 'http://10.0.0.5:8080/check?key=s3cret',
      note: 'see https://docs.example.com/x?ref=readme for details',
      plain: 'not a url ?token=stays',
    } }],
  } as unknown as RouteTable
  const dump = JSON.stringify(dumpTable(table))
  t.notMatch(dump, 'abc123')
  t.notMatch(dump, 's3cret')
  t.match(dump, 'https://hooks.example.com/v1/notify?token=[redacted]&channel=[redacted]#frag')
  t.match(dump, '"tokenUrl":"https://auth.example.com/oauth/token"', 'a URL without a query is as it was')
  t.match(dump, 'http://10.0.0.5:8080/check?key=[redacted]')
  t.match(dump, 'see https://docs.example.com/x?ref=[redacted] for details', 'a URL inside other text too')
  t.match(dump, '"plain":"not a url ?token=stays"', 'text that is no URL is left alone')
})
