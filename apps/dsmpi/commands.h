/* The subcommands of dsmpi. */
#ifndef DSMPI_COMMANDS_H
#define DSMPI_COMMANDS_H

#include "app.h"

int cmd_comm(app_t *app);
int cmd_allocation(app_t *app);
int cmd_device(app_t *app);
int cmd_events(app_t *app);
int cmd_execute(app_t *app);
int cmd_plan(app_t *app);
int cmd_predict(app_t *app);
int cmd_import(app_t *app);
int cmd_profile(app_t *app);
int cmd_run(app_t *app);
int cmd_search(app_t *app);
int cmd_systems(app_t *app);
int cmd_validate(app_t *app);
/* dsmpi validate --torch-trace (validate_torch.c): one process, no executor. */
int validate_torch(app_t *app);
int cmd_version(app_t *app);

#endif /* DSMPI_COMMANDS_H */
