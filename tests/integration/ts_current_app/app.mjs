// A DBOS TypeScript application on the current @dbos-inc/dbos-sdk release (the pin is in package-lock.json),
// whose conductor client is no longer open: it never connects to Relay. Relay manages it through its system
// database alone (tests/integration/test_dataplane_current_sdks.py). Plain ES module, no build step, the SDK's
// decorator-free API (DBOS.registerWorkflow, DBOS.runStep, DBOS.registerQueue).
//
// Configuration comes from the environment:
//   APP_NAME             the DBOS application name
//   SYSTEM_DATABASE_URL  postgresql://... (the system database)
//   APP_VERSION          optional application version
//   CONTROL_PORT         port of the loopback control server below (0: any free port)
//
// After DBOS.launch() it prints one line `READY {"executor_id", "app_version", "control_port", "dbos_version"}`
// and serves, on 127.0.0.1 only: POST /start {workflow, args, workflowId?, queueName?} -> {workflowId},
// POST /open {label} (opens a gate), GET /status/{workflowId} -> {status} (as the app's own SDK reads it) and
// GET /seen -> {seen: [{event, workflow_id, ...}]} (what the workflows recorded as they really ran).

import http from 'node:http';
import { readFileSync } from 'node:fs';
import { DBOS } from '@dbos-inc/dbos-sdk';

const QUEUE_NAME = 'ts_queue';
const GATE_POLL_MS = 200; // one gate step's wait: the SDK checks for cancellation between steps
const GATE_MAX_POLLS = 1500; // five minutes, then the gate gives up (a test never waits that long)
// The release npm ci installed (the package does not export its package.json).
const SDK_VERSION = JSON.parse(
  readFileSync(new URL('./node_modules/@dbos-inc/dbos-sdk/package.json', import.meta.url), 'utf8'),
).version;

const seen = [];
const opened = new Set();

function record(event, fields) {
  const entry = { event, workflow_id: DBOS.workflowID ?? null, ...fields };
  seen.push(entry);
  console.log('SEEN ' + JSON.stringify(entry));
}

async function greetFn(name) {
  const loud = await DBOS.runStep(async () => `hello ${name}`.toUpperCase(), { name: 'shout' });
  const result = await DBOS.runStep(async () => `${loud}!`, { name: 'exclaim' });
  record('greet', { result });
  return result;
}
const greet = DBOS.registerWorkflow(greetFn, { name: 'greet' });

// Waits, one short step at a time, until the test opens the gate `label` (POST /open).
async function gateFn(label) {
  record('gate-started', { label });
  try {
    await DBOS.runStep(async () => `prepared ${label}`, { name: 'prepare' });
    for (let i = 0; i < GATE_MAX_POLLS; i++) {
      const open = await DBOS.runStep(
        async () => opened.has(label) || (await new Promise((r) => setTimeout(r, GATE_POLL_MS)), opened.has(label)),
        { name: 'poll' },
      );
      if (open) break;
    }
    const result = await DBOS.runStep(async () => `${label}:opened`, { name: 'finish' });
    record('gate-finished', { label });
    return result;
  } catch (e) {
    record('gate-stopped', { label, reason: e?.name ?? String(e) });
    throw e;
  }
}
const gate = DBOS.registerWorkflow(gateFn, { name: 'gate' });

const WORKFLOWS = { greet, gate };

function readBody(req) {
  return new Promise((resolve, reject) => {
    let data = '';
    req.on('data', (chunk) => (data += chunk));
    req.on('end', () => {
      try {
        resolve(data ? JSON.parse(data) : {});
      } catch (e) {
        reject(e);
      }
    });
    req.on('error', reject);
  });
}

function reply(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function control(req, res) {
  if (req.method === 'POST' && req.url === '/start') {
    const body = await readBody(req);
    const fn = WORKFLOWS[body.workflow];
    if (!fn) return reply(res, 404, { error: `no workflow ${body.workflow}` });
    const params = {};
    if (body.workflowId) params.workflowID = body.workflowId;
    if (body.queueName) params.queueName = body.queueName;
    const handle = await DBOS.startWorkflow(fn, params)(...(body.args ?? []));
    return reply(res, 200, { workflowId: handle.workflowID });
  }
  if (req.method === 'POST' && req.url === '/open') {
    const body = await readBody(req);
    opened.add(body.label);
    return reply(res, 200, { opened: body.label });
  }
  if (req.method === 'GET' && req.url.startsWith('/status/')) {
    const status = await DBOS.getWorkflowStatus(decodeURIComponent(req.url.slice('/status/'.length)));
    return reply(res, 200, { status: status?.status ?? null });
  }
  if (req.method === 'GET' && req.url === '/seen') {
    return reply(res, 200, { seen });
  }
  return reply(res, 404, { error: 'no such route' });
}

async function main() {
  const config = { name: process.env.APP_NAME, systemDatabaseUrl: process.env.SYSTEM_DATABASE_URL };
  if (process.env.APP_VERSION) config.applicationVersion = process.env.APP_VERSION;
  DBOS.setConfig(config);
  await DBOS.launch(); // no conductor: this release's conductor client is not in the open package
  await DBOS.registerQueue(QUEUE_NAME, { workerConcurrency: 2, onConflict: 'always_update' });

  const server = http.createServer((req, res) => {
    control(req, res).catch((e) => reply(res, 500, { error: String(e?.message ?? e) }));
  });
  await new Promise((resolve) => server.listen(Number(process.env.CONTROL_PORT || 0), '127.0.0.1', resolve));
  const ready = {
    executor_id: DBOS.executorID,
    app_version: DBOS.applicationVersion,
    control_port: server.address().port,
    dbos_version: SDK_VERSION,
  };
  console.log('READY ' + JSON.stringify(ready));

  const stop = async () => {
    server.close();
    await DBOS.shutdown();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e) => {
  console.error('FAILED', e);
  process.exit(1);
});
