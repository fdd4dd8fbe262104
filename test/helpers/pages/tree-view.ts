// Draws a fixed draft tree with the demo's tree view, so the picture can be checked before the
// engine sends real trees: 7 nodes in depth-first order, the path 0 → 1 → 2 accepted.
import { drawTree } from '../../../demo/ui/tree.js';

const box = document.querySelector<HTMLElement>('[data-testid="tree-view"]');
if (box)
  drawTree(box, {
    tokens: [11, 12, 13, 14, 21, 22, 31],
    parents: [-1, 0, 1, 0, -1, 4, -1],
    accepted: [0, 1, 2],
  });
