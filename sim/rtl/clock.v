// The simulation top's clock (trainingcxl.sim.rtl.clock.ClockSource): a
// free-running clock inside the simulator. Driven from the test bench, every
// edge would cost a VPI write and a timed callback, about a fifth of the time
// of a training run; here an edge is one event of the simulator's own
// scheduler (built with --timing). Low at time 0, first rising edge after
// HALF_PERIOD time units.
module tcxl_clock #(
    parameter HALF_PERIOD = 2
) (
    output reg clk
);
    initial clk = 1'b0;
    always #(HALF_PERIOD) clk = ~clk;
endmodule
