/* Verilator's $finish, without the line cocotb's own end of a run prints.
 *
 * cocotb ends every Verilator run through vpi_control(vpiFinish), which
 * Verilator reports as "- :0: Verilog $finish": no file, no line, and nothing
 * the design did. This replaces Verilator's vl_finish (the build defines
 * VL_USER_FINISH): a $finish in the Verilog, which has a file and a line,
 * is still reported; the VPI's is not.
 */
#include "verilated.h"

void vl_finish(const char* filename, int linenum, const char* hier) VL_MT_UNSAFE {
    (void)hier;
    if (filename && filename[0])
        VL_PRINTF("- %s:%d: Verilog $finish\n", filename, linenum);
    Verilated::threadContextp()->gotFinish(true);
}
