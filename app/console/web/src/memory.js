// A memory's relations as an interactive graph (Cytoscape.js): drag, zoom, click a node to open
// that memory. Labels are drawn on a canvas: content is never markup.
import cytoscape from "cytoscape";
import { pageData } from "./lib/http.js";

function label(text) {
  return text.length > 60 ? `${text.slice(0, 57)}…` : text;
}

document.addEventListener("DOMContentLoaded", () => {
  const container = document.getElementById("graph");
  const graph = pageData("graph-data");
  if (!container || !graph) return;
  const elements = [
    ...graph.nodes.map((n) => ({
      data: { id: n.id, label: label(n.content), root: n.id === graph.root ? "yes" : "no" },
    })),
    ...graph.edges.map((e) => ({
      data: { id: e.id, source: e.source, target: e.target, label: e.relation_type },
    })),
  ];
  const cy = cytoscape({
    container,
    elements,
    layout: { name: "cose", animate: false, padding: 30, idealEdgeLength: () => 160, nodeRepulsion: () => 40000 },
    minZoom: 0.2,
    maxZoom: 1.2,
    style: [
      { selector: "node", style: { label: "data(label)", "font-size": 10, "text-wrap": "wrap", "text-max-width": 140, "background-color": "#6b7f99" } },
      { selector: 'node[root = "yes"]', style: { "background-color": "#d9822b" } },
      { selector: "edge", style: { label: "data(label)", "font-size": 8, color: "#617182", "text-rotation": "autorotate", "text-margin-y": -7, "curve-style": "bezier", "target-arrow-shape": "triangle", width: 1.5 } },
    ],
  });
  cy.on("tap", "node", (event) => {
    const id = event.target.id();
    if (id !== graph.root) window.location.assign(`/console/memories/${encodeURIComponent(id)}`);
  });
  container.dataset.ready = String(cy.nodes().length);
});
