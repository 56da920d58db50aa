// A Node.js process whose only work is a 1 ms setInterval: libuv makes a
// zero-timeout epoll_pwait before each blocking one. Runs argv[2] seconds.
const seconds = Number(process.argv[2] || 30);
let ticks = 0;
const t = setInterval(() => { ticks++; }, 1);
setTimeout(() => { clearInterval(t); }, seconds * 1000);
