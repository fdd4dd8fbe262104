// The engine's Web Worker: weft's own, which loads the model and serves it to the page.
import 'weft/worker';
