// Pulse status page. Plain JS, no build step.
//
// The page shows one page of targets from /api/targets (filtered and paged
// on the server, so it stays light at 10,000 targets) and keeps it live from
// /events, a server-sent event feed built on the same watch as
// WatchTransitions: transitions update rows and group counts at once,
// "results" events bring the named rows' new probe results (the strip), and
// added/removed/updated targets make the page refetch its list. The feed
// resumes with Last-Event-ID after a drop.
//
// When pulsed has tokens (-token-file), /api and /events answer 401 without
// one: the page then hides and forgets every row and asks for a token, which
// it keeps in this tab's sessionStorage and sends as "Authorization: Bearer"
// with every request. EventSource cannot send that header, so the feed is
// read with fetch (Feed, below), which can. This file, the HTML and the
// style sheet are all anyone gets without a token: they hold no data.
"use strict";

const STRIP = 20; // results shown per target; the server keeps as many
const TOKEN_KEY = "pulse-token";
const $ = (id) => document.getElementById(id);

// authHeaders returns the headers that carry the tab's token, if it has one.
function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

// Feed reads a server-sent event stream as EventSource does (named events,
// ids, retry, reconnecting with Last-Event-ID after a drop; a non-200 answer
// closes it for good), but over fetch, so that it can send the token.
class Feed {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSED = 2;

  constructor(url) {
    this.url = url;
    this.readyState = Feed.CONNECTING;
    this.status = 0; // the HTTP status that closed it
    this.lastId = "";
    this.retry = 2000;
    this.handlers = new Map();
    this.onopen = null;
    this.onerror = null;
    this.abort = null;
    this.timer = null;
    this.open();
  }

  addEventListener(name, fn) { this.handlers.set(name, fn); }

  close() {
    this.readyState = Feed.CLOSED;
    clearTimeout(this.timer);
    if (this.abort) this.abort.abort();
  }

  async open() {
    const abort = new AbortController();
    this.abort = abort;
    const headers = { Accept: "text/event-stream", ...authHeaders() };
    if (this.lastId) headers["Last-Event-ID"] = this.lastId;
    let res;
    try {
      res = await fetch(this.url, { headers, cache: "no-store", signal: abort.signal });
    } catch (err) {
      this.dropped();
      return;
    }
    if (this.readyState === Feed.CLOSED) return;
    if (!res.ok || !(res.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      this.status = res.status;
      this.readyState = Feed.CLOSED;
      if (this.onerror) this.onerror();
      return;
    }
    this.readyState = Feed.OPEN;
    if (this.onopen) this.onopen();
    try {
      await this.read(res.body.getReader());
    } catch (err) {
      // a broken stream: reconnect below
    }
    this.dropped();
  }

  dropped() {
    if (this.readyState === Feed.CLOSED) return;
    this.readyState = Feed.CONNECTING;
    if (this.onerror) this.onerror();
    this.timer = setTimeout(() => this.open(), this.retry);
  }

  async read(reader) {
    const dec = new TextDecoder();
    let buf = "", name = "", data = [], id = this.lastId;
    for (;;) {
      const { value, done } = await reader.read();
      if (done || this.readyState === Feed.CLOSED) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          this.lastId = id; // an event counts as delivered once complete
          const fn = this.handlers.get(name || "message");
          if (data.length && fn && this.readyState !== Feed.CLOSED) fn({ data: data.join("\n") });
          name = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? "" : line.slice(colon + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "event") name = v;
        else if (field === "data") data.push(v);
        else if (field === "id") id = v;
        else if (field === "retry" && /^[0-9]+$/.test(v)) this.retry = Number(v);
      }
    }
  }
}

const view = {
  group: "", state: "", q: "", offset: 0, limit: 100,
  sort: "severity", desc: false, // the server sorts: the worst first by default
  rows: new Map(),    // name -> {data, rev, tr}
  groups: new Map(),  // name -> {total, healthy, suspect, unhealthy, draining, maintenance, held, flapping, outliers, panicThreshold, slo}
  countsRev: 0,       // the revision the group counts reflect
  matched: 0,
  skew: 0,            // server clock minus browser clock, ms
  replica: "",        // the replica serving the page, with replicas on etcd
  detailToOpen: "",   // the target whose details the URL asks for, opened once the list is loaded
  es: null, esNames: null,
  reloadTimer: null, loading: false, again: false,
  gen: 0,             // bumped when the page locks: answers to older requests are dropped
};

function readURL() {
  const p = new URLSearchParams(location.search);
  view.group = p.get("group") || "";
  view.state = p.get("state") || "";
  view.q = p.get("q") || "";
  view.offset = Math.max(0, parseInt(p.get("offset") || "0", 10) || 0);
  view.sort = p.get("sort") || "severity";
  view.desc = p.get("desc") === "1";
  view.detailToOpen = p.get("target") || "";
  $("q").value = view.q;
  $("state").value = view.state;
}

function writeURL() {
  const p = new URLSearchParams();
  if (view.group) p.set("group", view.group);
  if (view.state) p.set("state", view.state);
  if (view.q) p.set("q", view.q);
  if (view.offset) p.set("offset", String(view.offset));
  if (view.sort !== "severity") p.set("sort", view.sort);
  if (view.desc) p.set("desc", "1");
  // The target whose details are open, or are to open once the list is
  // loaded (after a sign-in, say).
  const target = $("detail").dataset.name || view.detailToOpen;
  if (target) p.set("target", target);
  const s = p.toString();
  history.replaceState(null, "", s ? "?" + s : location.pathname);
}

// reload fetches the current page of targets and (re)connects the feed when
// the rows it names changed. Overlapping calls collapse into one more.
async function reload() {
  if (view.loading) { view.again = true; return; }
  view.loading = true;
  const gen = view.gen;
  try {
    const p = new URLSearchParams({ offset: view.offset, limit: view.limit });
    if (view.group) p.set("group", view.group);
    if (view.state) p.set("state", view.state);
    if (view.q) p.set("q", view.q);
    p.set("sort", view.sort);
    if (view.desc) p.set("desc", "1");
    const res = await fetch("/api/targets?" + p, { headers: authHeaders(), cache: "no-store" });
    if (gen !== view.gen) return;
    if (res.status === 401) { lock(true); return; }
    if (!res.ok) throw new Error(res.status + " " + (await res.text()));
    const page = await res.json();
    if (gen !== view.gen) return;
    view.skew = Date.parse(page.now) - Date.now();
    view.matched = page.matched;
    view.replica = (page.checker || {}).replica || "";
    setGroups(page.groups, page.revision);
    renderAlerts(page.checker || {});
    renderRows(page.targets, page.revision);
    renderRange(page);
    const names = page.targets.map((t) => t.name).join(",");
    if (names !== view.esNames || !view.es || view.es.readyState === Feed.CLOSED) connect(names);
    // Opened after the list, not before: the details take the target's
    // owner and vantages from its row, and the history needs the token
    // a locked page is still waiting for.
    if (view.detailToOpen) {
      openDetail(view.detailToOpen);
      view.detailToOpen = "";
    }
  } catch (err) {
    if (gen !== view.gen) return;
    setConn("disconnected", "cannot load targets: " + err.message);
    scheduleReload(3000);
  } finally {
    view.loading = false;
    if (view.again) { view.again = false; reload(); }
  }
}

function scheduleReload(ms) {
  if (view.reloadTimer) return;
  view.reloadTimer = setTimeout(() => { view.reloadTimer = null; reload(); }, ms);
}

function connect(names) {
  if (view.es) view.es.close();
  view.esNames = names;
  const es = new Feed("/events?names=" + encodeURIComponent(names));
  view.es = es;
  const on = (name, fn) => es.addEventListener(name, (ev) => { if (view.es === es) fn(JSON.parse(ev.data)); });
  es.onopen = () => setConn("live", "live");
  es.onerror = () => {
    if (view.es !== es) return;
    if (es.status === 401) {
      lock(true);
    } else if (es.readyState === Feed.CLOSED) {
      setConn("disconnected", "disconnected; retrying");
      scheduleReload(3000);
    } else {
      setConn("reconnecting", "reconnecting…");
    }
  };
  on("snapshot", (d) => {
    setGroups(d.groups || [], d.revision); // absent when no target matches
    for (const t of d.targets) updateRow(t, d.revision);
  });
  on("results", (d) => { for (const t of d.targets) updateRow(t, d.revision); });
  on("transition", (d) => {
    if (d.mode) {
      scheduleReload(300); // a target in a mode counts in its mode: the page's data has it
    } else if (d.revision > view.countsRev) {
      const g = view.groups.get(d.group);
      if (g) { g[d.from]--; g[d.to]++; }
      view.countsRev = d.revision;
      renderGroups();
    }
    const r = view.rows.get(d.target);
    if (r && d.revision > r.rev) {
      Object.assign(r.data, { state: d.to, streak: d.streak, lastTransitionTime: d.time });
      if (d.error) r.data.lastError = d.error;
      if (d.vantages) r.data.vantages = d.vantages;
      r.rev = d.revision;
      paintRow(r, true);
    }
    if (view.sort === "severity" || view.sort === "since") scheduleReload(1000); // the order changed
  });
  // A group's panic, a target's flapping, the checker's overload or a
  // vantage's standing changed: what holds which row comes with the page's
  // data; a vantage event also goes to the open history of a target it
  // probes.
  on("policy", (d) => {
    scheduleReload(300);
    if (d.kind && d.kind.startsWith("VANTAGE_")) vantageEvent(d);
  });
  const registry = (sign) => (d) => {
    if (sign && d.revision > view.countsRev) {
      const t = d.target;
      let g = view.groups.get(t.group);
      if (!g) { g = emptyGroup(); view.groups.set(t.group, g); }
      g.total += sign; g[t.mode || t.state] += sign;
      if (g.total <= 0) view.groups.delete(t.group);
      view.countsRev = d.revision;
      renderGroups();
    }
    scheduleReload(1000); // the page's membership may have changed
  };
  on("added", registry(1));
  on("removed", registry(-1));
  on("updated", registry(0));
}

// lock hides and forgets every row and asks for a token; refused says
// whether pulsed turned down the one the page sent.
function lock(refused) {
  view.gen++;
  view.again = false;
  if (view.es) view.es.close();
  view.es = null;
  view.esNames = null;
  clearTimeout(view.reloadTimer);
  view.reloadTimer = null;
  view.rows = new Map();
  view.groups = new Map();
  view.countsRev = 0;
  $("targets").tBodies[0].replaceChildren();
  $("groups").tBodies[0].replaceChildren();
  $("totals").textContent = "";
  $("range").textContent = "";
  $("alerts").replaceChildren(); // pulsed's own health names targets too
  // Details open now open again after the sign-in; the URL keeps them.
  view.detailToOpen = view.detailToOpen || $("detail").dataset.name || "";
  closeDetail();
  $("data").hidden = true;
  const had = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("signout").hidden = true;
  $("login-msg").textContent = refused && had
    ? "pulsed refused the token (401): enter another, of its -token-file."
    : "This pulsed needs a token: one of its -token-file, of the read role or higher.";
  $("login").hidden = false;
  setConn("locked", "token needed");
  $("token").focus();
}

function unlock(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("login").hidden = true;
  $("data").hidden = false;
  $("signout").hidden = false;
  setConn("connecting", "connecting…");
  reload();
}

function setConn(kind, text) {
  const el = $("conn");
  el.dataset.conn = kind;
  el.textContent = text;
}

function emptyGroup() {
  return { total: 0, healthy: 0, suspect: 0, unhealthy: 0, draining: 0, maintenance: 0, held: 0, flapping: 0, outliers: 0 };
}

function setGroups(list, rev) {
  if (rev < view.countsRev) return; // the feed already counted later events
  view.groups = new Map(list.map((g) => [g.name, { ...emptyGroup(), ...g }]));
  view.countsRev = rev;
  renderGroups();
}

function renderGroups() {
  const tbody = $("groups").tBodies[0];
  const sel = $("group");
  // sloText says where a group stands against its availability objective:
  // "objective 99.9%/30d: 72% of budget left, burn 0.4x".
  const sloText = (slo) => {
    if (!slo) return "";
    const pct = (v) => `${+(v * 100).toFixed(2)}%`;
    const win = slo.window_hours % 24 === 0 ? `${slo.window_hours / 24}d` : `${slo.window_hours}h`;
    let s = `objective ${pct(slo.objective)}/${win}`;
    if (slo.error_budget_remaining !== undefined) s += `: ${pct(slo.error_budget_remaining)} of budget left`;
    if (slo.burn_rate !== undefined) s += `, burn ${slo.burn_rate.toFixed(1)}x`;
    return s;
  };
  // threshold says a group's panic threshold and its bar: "25% (own): at
  // most 1 down", "off (default)"; the targets with no group are not a
  // pool, and a group the feed just added has none until the next reload.
  const threshold = (name, p) => {
    if (!p) return name ? ["", ""] : ["—", "targets with no group are not a pool: never held"];
    const src = p.own ? "own" : "default";
    const title = (p.own ? "the group's own panic threshold" : "pulsed's default panic threshold (-max-unhealthy-fraction)") +
      (p.maxUnhealthyFraction >= 1 ? ": off, it holds no failing target"
        : `: at most ${p.maxUnhealthy} of the group's targets out of traffic at once (draining and maintenance count); past that, failing targets are held routable`);
    if (p.maxUnhealthyFraction >= 1) return [`off (${src})`, title];
    return [`${+(p.maxUnhealthyFraction * 100).toFixed(1)}% (${src}): at most ${p.maxUnhealthy} down`, title];
  };
  const names = [...view.groups.keys()].sort();
  const sum = emptyGroup();
  let panics = 0;
  tbody.replaceChildren(...names.map((name) => {
    const g = view.groups.get(name);
    for (const k of Object.keys(sum)) sum[k] += g[k] || 0;
    if (g.held) panics++;
    const tr = document.createElement("tr");
    tr.dataset.group = name;
    if (name === view.group) tr.className = "selected";
    const policy = [g.held ? `panic: ${g.held} held` : "", g.flapping ? `${g.flapping} flapping` : "",
      g.outliers ? `${g.outliers} ${g.outliers === 1 ? "outlier" : "outliers"}` : "", sloText(g.slo)].filter((x) => x).join(", ");
    const [bar, barTitle] = threshold(name, g.panicThreshold);
    const barCell = cell(bar, "threshold"), policyCell = cell(policy, "n-held");
    barCell.title = barTitle;
    if (name && bar) policyCell.dataset.threshold = bar; // a phone shows it there
    tr.append(
      cell(name || "(no group)"), cell(g.total),
      cell(g.healthy, "n-healthy"), cell(g.suspect, "n-suspect"), cell(g.unhealthy, "n-unhealthy"),
      cell(g.draining, "n-draining"), cell(g.maintenance, "n-maintenance"), barCell, policyCell);
    tr.onclick = () => { view.group = view.group === name ? "" : name; view.offset = 0; filtersChanged(); };
    return tr;
  }));
  const keep = view.group;
  sel.replaceChildren(new Option("every group", ""), ...names.filter((n) => n).map((n) => new Option(n, n)));
  if (keep && !view.groups.has(keep)) sel.append(new Option(keep, keep));
  sel.value = keep;
  $("totals").textContent = `${sum.total} targets, ${sum.healthy + sum.suspect} routable`;
  renderSummary(sum, panics);
}

// renderSummary says in one line what needs attention across the fleet:
// targets down, groups in panic, flapping targets; planned work (draining,
// maintenance) is said apart, as it needs none.
function renderSummary(sum, panics) {
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const needs = [];
  if (sum.unhealthy) needs.push(plural(sum.unhealthy, "target down", "targets down"));
  if (panics) needs.push(plural(panics, "group in panic", "groups in panic"));
  if (sum.flapping) needs.push(plural(sum.flapping, "target flapping", "targets flapping"));
  if (sum.outliers) needs.push(plural(sum.outliers, "outlier", "outliers"));
  const planned = [];
  if (sum.draining) planned.push(`${sum.draining} draining`);
  if (sum.maintenance) planned.push(`${sum.maintenance} in maintenance`);
  const el = $("summary");
  el.dataset.level = needs.length ? "attention" : "ok";
  const head = needs.length ? "Needs attention: " + needs.join(", ")
    : sum.total ? `All ${plural(sum.total - sum.draining - sum.maintenance, "active target", "active targets")} routable`
      : "No targets yet";
  const span = document.createElement("span");
  span.className = "planned";
  span.textContent = planned.length ? " · planned: " + planned.join(", ") : "";
  el.replaceChildren(head, span);
}

function renderRange(page) {
  const first = page.matched ? page.offset + 1 : 0;
  const last = page.offset + page.targets.length;
  $("range").textContent = `${first}–${last} of ${page.matched}` + (page.matched !== page.total ? ` (of ${page.total})` : "");
  $("prev").disabled = page.offset === 0;
  $("next").disabled = last >= page.matched;
  $("empty").hidden = page.targets.length > 0;
}

function renderRows(targets, rev) {
  const old = view.rows;
  view.rows = new Map();
  const trs = targets.map((t) => {
    let r = old.get(t.name);
    if (r && r.rev > rev) { view.rows.set(t.name, r); return r.tr; } // the feed is ahead
    r = r ? Object.assign(r, { data: t, rev }) : { data: t, rev, tr: newRow(t.name) };
    view.rows.set(t.name, r);
    paintRow(r, false);
    return r.tr;
  });
  $("targets").tBodies[0].replaceChildren(...trs);
}

function updateRow(t, rev) {
  const r = view.rows.get(t.name);
  if (!r || rev < r.rev) return;
  const changed = r.data.state !== t.state;
  r.data = t;
  r.rev = rev;
  paintRow(r, changed);
  if ($("detail").dataset.name === t.name) {
    // The open details follow the row: a members change moves owners.
    showDetailVantages(t.name);
    showDetailOwner(t.name);
  }
}

// The columns of a target's row: class, and label on a phone's card.
const COLUMNS = [["name", ""], ["group", "group"], ["probe", "probe"], ["state", "state"], ["latency num", "latency"],
  ["err", "error"], ["since", "since"], ["uptime num", "uptime"], ["results", "recent"]];

function newRow(name) {
  const tr = document.createElement("tr");
  tr.dataset.name = name;
  for (const [c, label] of COLUMNS) {
    const td = document.createElement("td");
    td.className = c;
    if (label) td.dataset.label = label;
    tr.append(td);
  }
  const state = document.createElement("span");
  const badge = document.createElement("span");
  badge.className = "badge";
  const tags = document.createElement("span");
  tags.className = "tags";
  const vantages = document.createElement("span");
  vantages.className = "vantages";
  state.append(badge, tags, vantages);
  tr.cells[3].append(state);
  const strip = document.createElement("span");
  strip.className = "strip";
  tr.cells[8].append(strip);
  return tr;
}

// tagsOf returns what holds a target or qualifies its state, as [class, text].
function tagsOf(t) {
  const tags = [];
  if (t.panicHeld) tags.push(["held", `held: panic in ${t.group || "(no group)"}`]);
  if (t.flapping) tags.push(["flapping", "flapping"]);
  if (t.outlier) tags.push([t.outlier.ejected ? "outlier ejected" : "outlier", outlierText(t.outlier)]);
  if (t.carriedOver) tags.push(["carried", "carried over"]);
  if (t.mode) tags.push(["mode", t.modeReason ? `${t.mode}: ${t.modeReason}` : t.mode]);
  return tags;
}

function paintRow(r, flash) {
  const t = r.data, tr = r.tr, c = tr.cells;
  tr.dataset.state = t.state;
  tr.dataset.mode = t.mode || "";
  tr.dataset.held = t.panicHeld ? "1" : "";
  tr.dataset.flapping = t.flapping ? "1" : "";
  tr.dataset.carried = t.carriedOver ? "1" : "";
  c[0].textContent = t.name;
  c[0].title = t.source ? `${t.name}; registered by ${t.source}` : t.name;
  if (t.source && t.source.startsWith("discovery:")) {
    const src = document.createElement("span");
    src.className = "src";
    src.textContent = t.source; // the discovery group that found it
    c[0].append(" ", src);
  }
  c[1].textContent = t.group;
  c[2].textContent = t.kind + " " + (t.probe || "");
  c[2].title = c[2].textContent + (t.model === "three_state" ? " (three_state model)" : "");
  const [badge, tags, vantages] = c[3].firstChild.children;
  badge.textContent = t.streak;
  tags.replaceChildren(...tagsOf(t).map(([cls, text]) => {
    const s = document.createElement("span");
    s.className = "tag " + cls;
    s.textContent = text;
    return s;
  }));
  vantages.replaceChildren(...(t.vantages || []).map(vantageChip));
  c[3].title = `${t.state}` + (t.verdict && t.verdict !== t.state ? ` (its results say ${t.verdict})` : "") +
    `; rise ${t.rise}, fall ${t.fall}; ${t.passStreak} passes, ${t.failStreak} failures in a row` +
    (t.model === "three_state" ? "; three_state model" : "") +
    (t.vantages ? "; " + vantagesText(t.vantages) : "") +
    (t.owner ? "; " + ownerText(t.owner) : "");
  c[4].textContent = t.lastLatencySeconds == null ? "—" : fmtLatency(t.lastLatencySeconds);
  c[5].textContent = t.lastError || "";
  c[5].title = t.lastError || "";
  c[6].textContent = sinceText(t);
  const n = (t.results || []).length;
  c[7].textContent = t.uptime == null ? "—" : fmtPercent(t.uptime);
  c[7].title = t.uptime == null ? "no recent results" : `${Math.round(t.uptime * n)} of the last ${n} results passed`;
  const strip = c[8].firstChild;
  const res = (t.results || []).slice(-STRIP);
  strip.replaceChildren(...res.map((x) => {
    const s = document.createElement("span");
    s.className = x.pass ? "pass" : "fail";
    s.title = `${x.time}: ${x.pass ? "pass" : "fail"} in ${fmtLatency(x.latencySeconds)}${x.error ? " (" + x.error + ")" : ""}`;
    return s;
  }));
  if (flash) {
    tr.classList.remove("changed");
    void tr.offsetWidth; // restart the animation
    tr.classList.add("changed");
  }
}

// outlierText says why its group's outlier detection holds a target:
// "outlier: p50 38ms vs group 4ms", or "ejected: ..." when it is not
// routable.
function outlierText(o) {
  return `${o.ejected ? "ejected" : "outlier"}: ${o.reason}`;
}

// ownerText names the replica that probes a target and stores its state,
// with replicas on etcd: "probed by replica r2", "(this one)" when it
// serves the page.
function ownerText(owner) {
  return `probed by replica ${owner}` + (owner === view.replica ? " (this one)" : "");
}

// vantageText is one vantage's verdict as pulsed writes it:
// "zone-b=unhealthy(connection refused)".
function vantageText(v) {
  return `${v.label}=${v.state}` + (v.error ? `(${v.error})` : "");
}

function vantagesText(vs) {
  return "vantages: " + vs.map(vantageText).join(" ");
}

// vantageChip is one vantage of a target probed from several: its label,
// coloured by its verdict, struck through while the vantage is suspect.
function vantageChip(v) {
  const s = document.createElement("span");
  s.className = "vt";
  s.dataset.state = v.state;
  if (v.suspect) s.dataset.suspect = "1";
  s.textContent = v.label;
  s.title = `${v.label} (replica ${v.member}): ${v.state}` + (v.error ? `: ${v.error}` : "") +
    (v.suspect ? "; the vantage is suspect: its verdict is left out of the quorum" : "");
  return s;
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function fmtLatency(s) {
  if (s < 0.001) return (s * 1e6).toFixed(0) + "µs";
  if (s < 1) return (s * 1e3).toFixed(1) + "ms";
  return s.toFixed(2) + "s";
}

// renderAlerts shows pulsed's own troubles: overload, a registry it cannot write.
function renderAlerts(ck) {
  const out = [];
  if (ck.degraded) {
    out.push(`checker degraded${ck.since ? " since " + new Date(ck.since).toLocaleTimeString() : ""}: ${ck.reason || "overloaded"}` +
      " (its own probe timeouts do not count toward fall until it recovers)");
  }
  const others = (ck.degradedReplicas || []).filter((id) => !ck.degraded || id !== ck.replica);
  if (others.length) {
    out.push(`${others.length === 1 ? "replica" : "replicas"} ${others.join(", ")} degraded` +
      ` (${others.length === 1 ? "its" : "their"} own probe timeouts do not count toward fall until ${others.length === 1 ? "it recovers" : "they recover"})`);
  }
  for (const v of ck.suspectVantages || []) {
    out.push(`vantage ${v.label} (replica ${v.member}) suspect${v.since ? " since " + new Date(v.since).toLocaleTimeString() : ""}:` +
      ` unhealthy from it, healthy from the others, for ${v.disagree} of the ${v.judged} targets it is judged on` +
      " (its verdicts are left out of every quorum)");
  }
  for (const d of ck.discoveryFailing || []) {
    out.push(`discovery source ${d.source} failing${d.since ? " since " + new Date(d.since).toLocaleTimeString() : ""}: ${d.error}` +
      " (its last good set of targets stays)");
  }
  if (ck.registryError) {
    out.push(`registry error: ${ck.registryError} (pulsed keeps probing, and refuses the changes it cannot store)`);
  }
  $("alerts").replaceChildren(...out.map((text) => {
    const p = document.createElement("p");
    p.className = "alert";
    p.textContent = text;
    return p;
  }));
}

function fmtPercent(f) {
  const p = f * 100;
  return (p === 100 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + "%";
}

// sinceText is how long a target has been in its state: "4m 12s", or
// "down since added" when it never changed.
function sinceText(t) {
  if (t.lastTransitionTime) return since(t.lastTransitionTime);
  const word = { healthy: "up", unhealthy: "down", suspect: "suspect" }[t.state] || t.state;
  return word + " since added";
}

function renderSort() {
  for (const th of document.querySelectorAll("#targets th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === view.sort);
    th.classList.toggle("desc", th.dataset.sort === view.sort && view.desc);
    th.setAttribute("aria-sort", th.dataset.sort !== view.sort ? "none" : view.desc ? "descending" : "ascending");
  }
}

function since(stamp) {
  if (!stamp) return "never";
  let s = Math.max(0, Math.floor((Date.now() + view.skew - Date.parse(stamp)) / 1000));
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60); s %= 60;
  if (m < 60) return `${m}m ${s}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

function filtersChanged() {
  writeURL();
  renderSort();
  reload();
}

// openDetail shows the history of the target called name, loaded now
// from /api/history: uptime over 1h, 24h, 7d and 30d, latency by the hour
// and the transitions.
async function openDetail(name) {
  const d = $("detail");
  d.hidden = false;
  d.dataset.name = name;
  d.dataset.loaded = "";
  writeURL();
  $("detail-name").textContent = name;
  $("detail-msg").textContent = "loading…";
  $("detail-uptime").replaceChildren();
  $("detail-chart").replaceChildren();
  $("detail-events").replaceChildren();
  $("detail-top").textContent = "";
  showDetailVantages(name);
  showDetailOwner(name);
  let res, h;
  try {
    res = await fetch("/api/history?target=" + encodeURIComponent(name), { headers: authHeaders(), cache: "no-store" });
    if (res.status === 401) { closeDetail(); lock(true); return; }
    if (!res.ok) throw new Error((await res.text()).trim() || String(res.status));
    h = await res.json();
  } catch (err) {
    if (d.dataset.name === name) $("detail-msg").textContent = "cannot load the history: " + err.message;
    return;
  }
  if (d.dataset.name !== name || d.hidden) return; // another opened, or closed, meanwhile
  renderDetail(h);
  d.dataset.loaded = "1";
  d.scrollIntoView({ block: "nearest" });
}

function closeDetail() {
  const d = $("detail");
  d.hidden = true;
  d.dataset.name = "";
  d.dataset.loaded = "";
  writeURL();
  for (const id of ["detail-name", "detail-msg", "detail-top", "detail-vantages", "detail-owner"]) $(id).textContent = "";
  $("detail-uptime").replaceChildren();
  $("detail-chart").replaceChildren();
  $("detail-events").replaceChildren();
}

// showDetailVantages shows the verdicts of the open target's vantages, as
// its row has them.
function showDetailVantages(name) {
  const r = view.rows.get(name), p = $("detail-vantages");
  const vs = r && r.data.vantages;
  p.hidden = !vs;
  p.replaceChildren(...(vs ? ["vantages: ", ...vs.flatMap((v, i) => {
    const s = vantageChip(v);
    s.textContent = vantageText(v);
    return i ? [" ", s] : [s];
  })] : []));
}

// showDetailOwner says which replica probes the open target, as its row
// has it: with replicas on etcd, that replica keeps the history of its
// probes.
function showDetailOwner(name) {
  const r = view.rows.get(name), p = $("detail-owner");
  const owner = r && r.data.owner;
  p.hidden = !owner;
  p.textContent = owner ? ownerText(owner) : "";
}

// vantageEvent adds a VANTAGE_SUSPECT or VANTAGE_RECOVERED event to the
// open history when the vantage probes its target: the history keeps no
// event that is about no target.
function vantageEvent(d) {
  const det = $("detail"), r = view.rows.get(det.dataset.name);
  if (det.hidden || !det.dataset.loaded || !r || !(r.data.vantages || []).some((v) => v.member === d.replica)) return;
  const list = $("detail-events");
  if (list.firstChild && list.firstChild.classList.contains("muted")) list.replaceChildren(); // "none"
  list.prepend(eventItem(d));
}

// eventItem is a policy event of a history's list.
function eventItem(e) {
  const li = document.createElement("li");
  const time = document.createElement("time");
  time.dateTime = e.time;
  time.textContent = new Date(e.time).toLocaleString();
  li.className = "policy";
  li.dataset.kind = e.kind;
  li.append(time, " " + e.text);
  return li;
}

function renderDetail(h) {
  // With replicas, the replica that probes a target keeps its history:
  // say so rather than show an empty one as if it were the target's.
  const msg = $("detail-msg");
  msg.replaceChildren(h.group ? "group " + h.group : "");
  if (h.keptBy) {
    msg.append((h.group ? "; " : "") + `no probe of it recorded by this replica: replica ${h.keptBy} probes it and keeps its history (`,
      keeperPageLink(h), ")");
  }
  $("detail-uptime").replaceChildren(...["1h", "24h", "7d", "30d"].map((w) => {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = "uptime " + w;
    const dd = document.createElement("dd");
    dd.dataset.window = w;
    const u = h.uptime[w];
    dd.textContent = u == null ? "—" : fmtUptime(u);
    dd.title = u == null ? "no probe recorded" : "the share of probes that passed";
    div.append(dt, dd);
    return div;
  }));
  drawLatency(h.latency);
  $("detail-events").replaceChildren(...h.events.slice().reverse().map((e) => {
    const li = document.createElement("li");
    const time = document.createElement("time");
    time.dateTime = e.time;
    time.textContent = new Date(e.time).toLocaleString();
    if (e.kind) return eventItem(e); // a policy event: a panic, flapping, a suspect vantage
    li.dataset.to = e.to;
    const to = document.createElement("span");
    to.className = "to";
    to.textContent = e.to;
    const why = [e.reason, e.error, e.mode !== "active" ? e.mode : ""].filter(Boolean).join("; ");
    li.append(time, e.from + " → ", to, why ? " (" + why + ")" : "");
    return li;
  }));
  if (h.events.length === 0) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "none";
    $("detail-events").append(li);
  }
}

// keeperPageLink is "open its status page", a link to the page of the
// replica that keeps h's history, opened on the same target, when h gives
// that page. The URL comes from another replica's member key: only http
// and https become links, so that a javascript: URL put there runs
// nothing here.
function keeperPageLink(h) {
  const text = "open its status page";
  let url;
  try {
    url = new URL(h.keptByPage);
  } catch (err) {
    return text; // none given
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return text;
  // The list filtered to the target holds its row, which its details
  // take the owner from, however large the fleet.
  url.search = new URLSearchParams({ q: h.target, target: h.target }).toString();
  const a = document.createElement("a");
  a.href = url.href;
  a.textContent = text;
  return a;
}

// fmtUptime prints a share as an uptime, never rounded up to 100%.
function fmtUptime(u) {
  const s = (u * 100).toFixed(2);
  return (s === "100.00" && u < 1 ? "99.99" : s) + "%";
}

// drawLatency draws the hours' p50 and p95 as steps (an hour wide each),
// scaled to the highest p95, with the hours that had failures shaded.
function drawLatency(hours) {
  const svg = $("detail-chart");
  const NS = "http://www.w3.org/2000/svg";
  const W = 480, H = 120, n = Math.max(hours.length, 1), step = W / n;
  const top = Math.max(0, ...hours.map((p) => p.p95Seconds || 0));
  $("detail-top").textContent = top > 0 ? "top of the chart " + fmtLatency(top) : "no probe recorded";
  const y = (v) => H - 4 - (top > 0 ? (v / top) * (H - 8) : 0);
  const parts = [];
  hours.forEach((p, i) => {
    if (!p.failures) return;
    const r = document.createElementNS(NS, "rect");
    r.setAttribute("class", "fail");
    r.setAttribute("x", String(i * step));
    r.setAttribute("width", String(step));
    r.setAttribute("y", "0");
    r.setAttribute("height", String(H));
    const title = document.createElementNS(NS, "title");
    title.textContent = `${p.start}: ${p.failures} of ${p.probes} probes failed`;
    r.append(title);
    parts.push(r);
  });
  for (const key of ["p95", "p50"]) {
    let run = [];
    const flush = () => {
      if (run.length === 0) return;
      const line = document.createElementNS(NS, "polyline");
      line.setAttribute("class", key);
      line.setAttribute("points", run.join(" "));
      parts.push(line);
      run = [];
    };
    hours.forEach((p, i) => {
      if (!p.probes) { flush(); return; }
      const v = y(p[key + "Seconds"]).toFixed(1);
      run.push(`${(i * step).toFixed(1)},${v}`, `${((i + 1) * step).toFixed(1)},${v}`);
    });
    flush();
  }
  svg.replaceChildren(...parts);
}

function init() {
  readURL();
  $("targets").tBodies[0].addEventListener("click", (e) => {
    const td = e.target.closest("td.name");
    if (td) openDetail(td.parentElement.dataset.name);
  });
  $("detail-close").addEventListener("click", closeDetail);
  let qTimer = null;
  $("q").addEventListener("input", () => {
    clearTimeout(qTimer);
    qTimer = setTimeout(() => { view.q = $("q").value.trim(); view.offset = 0; filtersChanged(); }, 250);
  });
  $("state").addEventListener("change", () => { view.state = $("state").value; view.offset = 0; filtersChanged(); });
  $("group").addEventListener("change", () => { view.group = $("group").value; view.offset = 0; filtersChanged(); });
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); filtersChanged(); });
  $("next").addEventListener("click", () => { view.offset += view.limit; filtersChanged(); });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  for (const th of document.querySelectorAll("#targets th[data-sort]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.sort;
      view.desc = view.sort === key ? !view.desc : false;
      view.sort = key;
      view.offset = 0;
      filtersChanged();
    });
  }
  renderSort();
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    if (token) unlock(token);
  });
  $("signout").addEventListener("click", () => lock(false));
  $("signout").hidden = sessionStorage.getItem(TOKEN_KEY) === null;
  setInterval(() => { for (const r of view.rows.values()) r.tr.cells[6].textContent = sinceText(r.data); }, 1000);
  // What no event announces (a registry error, uptime) is read again now and then.
  setInterval(() => { if (!$("data").hidden && view.es) scheduleReload(0); }, 15000);
  reload();
}

init();
