// Runs the page's script under Node against a live server, with a minimal DOM: each tool's
// button handler is called as a click would, and what the page shows is printed as JSON.
// usage: node page_driver.js BASE_URL SCRIPT_FILE
const fs = require("fs");
const [base, scriptFile] = process.argv.slice(2);

class Element {
  constructor(tag, id) { this.tagName = tag; this.id = id; this.children = []; this.textContent = "";
    this.value = ""; this.className = ""; this.dataset = {}; this.hidden = false; this.files = [];
    this.classList = { add() {}, remove() {} }; this.checked = false; this.rows = []; }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = cs; this.rows = []; }
  insertRow() { const r = new Element("tr"); this.rows.push(r); return r; }
}
const byId = {};
const document = {
  getElementById: (id) => (byId[id] = byId[id] || new Element("div", id)),
  createElement: (tag) => new Element(tag),
  querySelectorAll: () => [],
};
const page = { document, fetch: (path, opts) => fetch(base + path, opts), URL, Blob,
               TextDecoder, JSON, Number, String, console };

(async () => {
  const source = fs.readFileSync(scriptFile, "utf8");
  new Function(...Object.keys(page), source)(...Object.values(page));
  const $ = document.getElementById;
  const out = {};

  $("solve-q").value = "What is 2 + 3?"; $("solve-t").value = "0"; $("solve-m").value = "20";
  await $("solve-go").onclick();
  out.solve = { boxes: $("solve-out").children.map((c) => [c.className, c.textContent]),
                error: $("solve-err").textContent };

  $("der-text").value = "(x+1)^2\n= x^2 + 2x + 1\n= x^2 + 1";
  await $("der-go").onclick();
  out.derivation = $("der-table").rows.map((r) => r.children.map((c) => c.textContent));

  $("plot-text").value = "x^2"; $("plot-min").value = "-2"; $("plot-max").value = "2";
  await $("plot-go").onclick();
  out.plot = { src: $("plot-img").src || "", error: $("plot-err").textContent };
  $("plot-text").value = "__import__('os')";
  await $("plot-go").onclick();
  out.plot_error = $("plot-err").textContent;

  $("pr-learner").value = "node"; await $("pr-next").onclick();
  out.practice = { question: $("pr-question").textContent, progress: $("pr-progress").textContent };
  $("pr-answer").value = "no idea"; await $("pr-go").onclick();
  out.practice.feedback = $("pr-feedback").children.map((c) => c.textContent);

  const text = "question,answer,student_answer\nq,2,2\nq,2,3\n";
  $("grade-file").files = [{ name: "hw.csv", text: async () => text }];
  await $("grade-go").onclick();
  out.grade = { summary: $("grade-sum").textContent, rows: $("grade-table").rows.length,
                download: !$("grade-dl").hidden, error: $("grade-err").textContent };
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
