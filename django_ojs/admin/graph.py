"""Server-rendered SVG of a workflow: pure geometry, no queries, no JavaScript.

A chain is a row of boxes joined by arrows; a group or batch is a column of members, and a
batch's callbacks a second column fed by every member. ``templates/admin/ojs/workflow/
graph.html`` draws the boxes (coloured by state, each a link to its job) and the edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 40, 40, 12, 10
#: Members drawn at most; the rest are summarised in one "+N more" box.
MAX_NODES = 40


@dataclass
class Node:
    label: str
    sublabel: str
    state: str
    url: str
    x: float
    y: float
    w: float = BOX_W
    h: float = BOX_H
    nested: bool = False

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def text_y(self) -> float:
        return self.y + 16

    @property
    def sub_y(self) -> float:
        return self.y + 31


@dataclass
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass
class Graph:
    width: float
    height: float
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)


@dataclass(frozen=True)
class Box:
    """What the graph needs of one job: labels, state and the link to its admin page."""

    label: str
    sublabel: str
    state: str
    url: str
    #: A nested workflow (drawn with a dashed border), not a job.
    nested: bool = False


def layout(kind: str, steps: Sequence[Box], callbacks: Sequence[Box] = ()) -> Graph:
    """Place ``steps`` (chain order, or members) and ``callbacks`` (batch)."""
    shown = list(steps[:MAX_NODES])
    if len(steps) > MAX_NODES:
        shown.append(Box(f"+{len(steps) - MAX_NODES} more", "", "more", ""))
    graph = Graph(0, 0)
    if kind == "chain":
        for i, box in enumerate(shown):
            graph.nodes.append(_node(box, PAD + i * (BOX_W + GAP_X), PAD))
        for a, b in zip(graph.nodes, graph.nodes[1:], strict=False):
            graph.edges.append(Edge(a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2))
        graph.width = PAD * 2 + len(shown) * BOX_W + max(len(shown) - 1, 0) * GAP_X
        graph.height = PAD * 2 + BOX_H
        return graph
    members = [_node(box, PAD, PAD + i * (BOX_H + GAP_Y)) for i, box in enumerate(shown)]
    graph.nodes.extend(members)
    column_h = len(shown) * BOX_H + max(len(shown) - 1, 0) * GAP_Y
    if callbacks:
        cb_h = len(callbacks) * BOX_H + (len(callbacks) - 1) * GAP_Y
        top = PAD + max(column_h - cb_h, 0) / 2
        x = PAD + BOX_W + GAP_X * 2
        for i, box in enumerate(callbacks):
            node = _node(box, x, top + i * (BOX_H + GAP_Y))
            graph.nodes.append(node)
            for member in members:
                graph.edges.append(
                    Edge(member.x + member.w, member.y + member.h / 2, node.x, node.y + node.h / 2)
                )
        graph.width = x + BOX_W + PAD
        column_h = max(column_h, cb_h)
    else:
        graph.width = PAD * 2 + BOX_W
    graph.height = PAD * 2 + column_h
    return graph


def _node(box: Box, x: float, y: float) -> Node:
    return Node(box.label[:22], box.sublabel[:26], box.state, box.url, x, y, nested=box.nested)
