// The fields extensions never set (extensions/gateway-fields.ts): what a hook
// wrote in place is undone when the message leaves the flow.
import t from 'tap'
import { isGatewayField, keepGatewayFields } from '../../lib/extensions/gateway-fields.ts'
import type { OutgoingHeaders } from '../../lib/upstream/types.ts'

t.test('framing, Host and connection fields are the gateway\'s, whatever their case', async (t) => {
  for (const name of ['Content-Length', 'transfer-encoding', 'HOST', 'connection', 'keep-alive', 'te', 'upgrade', 'trailer', 'proxy-connection']) t.ok(isGatewayField(name), name)
  for (const name of ['authorization', 'content-type', 'x-foo', 'content-encoding']) t.notOk(isGatewayField(name), name)
})

t.test('a request keeps its framing; a hook\'s Connection goes with the fields it names, not the gateway\'s', async (t) => {
  const headers: OutgoingHeaders = {
    'content-length': '3', 'transfer-encoding': 'chunked', host: 'evil.example.test', upgrade: 'websocket',
    connection: 'close, X-Foo, upgrade, content-length', 'x-foo': '1', 'x-kept': 'yes',
  }
  keepGatewayFields(headers, '38', true, 'default/r')
  t.same(headers, { 'content-length': '38', upgrade: 'websocket', 'x-kept': 'yes' })
  const bodiless: OutgoingHeaders = { 'content-length': '3' }
  keepGatewayFields(bodiless, undefined, true, 'default/r')
  t.same(bodiless, {}, 'a request that had no Content-Length gets none')
})

t.test('a response keeps the length it came with, or the one of the body the flow replaced', async (t) => {
  const headers: OutgoingHeaders = { 'content-length': '2', 'transfer-encoding': 'chunked', 'x-a': '1' }
  keepGatewayFields(headers, '10', false, 'default/r')
  t.same(headers, { 'content-length': '10', 'x-a': '1' })
  const untouched: OutgoingHeaders = { 'content-length': '10' }
  keepGatewayFields(untouched, '10', false, 'default/r')
  t.same(untouched, { 'content-length': '10' })
})
