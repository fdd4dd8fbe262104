import 'weft/worker';
