// A DBOS TypeScript application for Relay's integration tests: an unmodified @dbos-inc/dbos-sdk executor
// connected to Relay as its conductor. Plain ES module, no build step: it uses the SDK's decorator-free API
// (DBOS.registerWorkflow, DBOS.runStep, DBOS.registerQueue, DBOS.createSchedule).
//
// Configuration comes from the environment:
//   APP_NAME             the DBOS application name (the {appName} of /websocket/{appName}/{key})
//   CONDUCTOR_URL        Relay's ws://host:port;  CONDUCTOR_KEY: the API key Relay issued
//   SYSTEM_DATABASE_URL  postgresql://... (the system database)
//   APP_VERSION          optional application version
//   CONTROL_PORT         port of the small loopback control server below (0: any free port)
//
// After DBOS.launch() it prints one line `READY {"executor_id", "app_version", "control_port"}` and serves,
// on 127.0.0.1 only, a control API the test drives the application with (what a real app's own endpoints
// would do): POST /start {workflow, args, workflowId?, queueName?} -> {workflowId},
// POST /send {destination, message, topic?}, POST /flags {failing}, GET /result/{workflowId}, GET /alerts.
// Every alert Relay delivers is also printed as one line `ALERT {"name", "message", "metadata"}`.

import http from 'node:http';
import { DBOS } from '@dbos-inc/dbos-sdk';

const QUEUE_NAME = 'ts_queue';
const SCHEDULE_NAME = 'ts_yearly';

// Read by the `fragile` step: a test makes workflows fail, then "fixes" them and forks from the failure.
const flags = { failing: false };
// What the app's alert handler received, in order.
const alerts = [];

async function greetFn(name) {
  const loud = await DBOS.runStep(async () => `hello ${name}`.toUpperCase(), { name: 'shout' });
  return await DBOS.runStep(async () => `${loud}!`, { name: 'exclaim' });
}
const greet = DBOS.registerWorkflow(greetFn, { name: 'greet' });

// Waits for a message on topic "go": a workflow that stays PENDING until the test lets it go.
// Each step body prints `STEP name tag` when it really runs (not when replayed from the system database): the
// recovery tests count these lines across executors.
async function gateFn(tag) {
  await DBOS.runStep(async () => ranStep('prepare', tag, `prepared ${tag}`), { name: 'prepare' });
  const message = await DBOS.recv('go', 120);
  return await DBOS.runStep(async () => ranStep('finish', tag, `${tag}:${message}`), { name: 'finish' });
}

function ranStep(name, tag, result) {
  console.log(`STEP ${name} ${tag}`);
  return result;
}
const gate = DBOS.registerWorkflow(gateFn, { name: 'gate' });

// Events, a stream and a notification, all read back through Relay.
async function chattyFn(label) {
  await DBOS.setEvent('progress', `started ${label}`);
  await DBOS.writeStream('log', 'line-1');
  await DBOS.writeStream('log', 'line-2');
  await DBOS.closeStream('log');
  const ping = await DBOS.recv('ping', 120);
  await DBOS.setEvent('progress', `done ${label}`);
  return `${label} got ${ping}`;
}
const chatty = DBOS.registerWorkflow(chattyFn, { name: 'chatty' });

async function flakyFn(label) {
  await DBOS.runStep(async () => `first ${label}`, { name: 'first' });
  return await DBOS.runStep(
    async () => {
      if (flags.failing) throw new Error(`fragile step failed for ${label}`);
      return `recovered ${label}`;
    },
    { name: 'fragile' },
  );
}
const flaky = DBOS.registerWorkflow(flakyFn, { name: 'flaky' });

async function parentFn(name) {
  const handle = await DBOS.startWorkflow(greet)(name);
  const childResult = await handle.getResult();
  return `parent of ${childResult}`;
}
const parent = DBOS.registerWorkflow(parentFn, { name: 'parent' });

async function tickFn(scheduledDate, context) {
  await DBOS.runStep(async () => `tick at ${scheduledDate.toISOString()} (${JSON.stringify(context)})`, {
    name: 'tick_step',
  });
}
const tick = DBOS.registerWorkflow(tickFn, { name: 'tick' });

const WORKFLOWS = { greet, gate, chatty, flaky, parent };

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
  if (req.method === 'POST' && req.url === '/send') {
    const body = await readBody(req);
    await DBOS.send(body.destination, body.message, body.topic);
    return reply(res, 200, { sent: true });
  }
  if (req.method === 'POST' && req.url === '/flags') {
    const body = await readBody(req);
    if (typeof body.failing === 'boolean') flags.failing = body.failing;
    return reply(res, 200, { ...flags });
  }
  if (req.method === 'GET' && req.url.startsWith('/result/')) {
    const id = decodeURIComponent(req.url.slice('/result/'.length));
    const status = await DBOS.getWorkflowStatus(id);
    return reply(res, 200, { status: status?.status ?? null, output: status?.output ?? null });
  }
  if (req.method === 'GET' && req.url === '/alerts') {
    return reply(res, 200, alerts);
  }
  return reply(res, 404, { error: 'no such route' });
}

async function main() {
  const config = {
    name: process.env.APP_NAME,
    systemDatabaseUrl: process.env.SYSTEM_DATABASE_URL,
  };
  if (process.env.APP_VERSION) config.applicationVersion = process.env.APP_VERSION;
  DBOS.setConfig(config);
  DBOS.setAlertHandler(async (name, message, metadata) => {
    const alert = { name, message, metadata };
    alerts.push(alert);
    console.log('ALERT ' + JSON.stringify(alert));
  });
  // In 5.2.11 the conductor settings are launch options, not DBOSConfig fields.
  await DBOS.launch({
    conductorURL: process.env.CONDUCTOR_URL,
    conductorKey: process.env.CONDUCTOR_KEY,
    conductorExecutorMetadata: { runtime: 'node', pid: process.pid },
  });
  // Database-backed queue and schedule: both only after launch. Two executors of one app may share the
  // database, so a second registration of either must be harmless.
  await DBOS.registerQueue(QUEUE_NAME, { workerConcurrency: 2, onConflict: 'always_update' });
  if ((await DBOS.getSchedule(SCHEDULE_NAME)) === null) {
    // Once a year at midnight on January 1st: it never fires during a test; tests trigger and backfill it.
    await DBOS.createSchedule({
      scheduleName: SCHEDULE_NAME,
      workflowFn: tick,
      schedule: '0 0 1 1 *',
      context: { owner: 'relay-tests' },
    });
  }

  const server = http.createServer((req, res) => {
    control(req, res).catch((e) => reply(res, 500, { error: String(e?.message ?? e) }));
  });
  await new Promise((resolve) => server.listen(Number(process.env.CONTROL_PORT || 0), '127.0.0.1', resolve));

  const ready = {
    executor_id: DBOS.executorID,
    app_version: DBOS.applicationVersion,
    control_port: server.address().port,
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
