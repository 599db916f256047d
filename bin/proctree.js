#!/usr/bin/env node
'use strict';
require('../dist/cjs/cli/main.js').cli();
